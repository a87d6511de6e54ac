"""The JARVICE gateway: the add-on's only holder of the account keys.

Burst pods carry no key. Their runner speaks the JARVICE API to this gateway with a projected
ServiceAccount token as its key; the gateway authenticates the token by TokenReview, binds it to the
pod it was issued for, and forwards only what the product decided for that pod (machine, nodes,
walltime, price, app), after the namespace's budget and caps are checked against what the gateway
itself has submitted and JARVICE still runs. Everything else a pod may ask (status, output, signals,
shutdown, terminate) is served for the pod's own jobs only.
"""
