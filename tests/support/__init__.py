"""What the tests share: clocks moved by hand, GPU node markings, builders and helpers for the webhook's
admission, the Lease, the e2e groups, the real node (its pods and Indexed Jobs) and the installed controller.

Test modules import from here, never from each other; fixtures shared by several modules live in the
tier's conftest.py."""
