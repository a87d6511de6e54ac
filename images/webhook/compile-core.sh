#!/bin/sh
# Compile the webhook's decision core with mypyc (issue 15): the modules every review and every watch
# event runs through, pure and typed (mypy --strict). Run in a directory holding copies of webhook/,
# jarvice/ and kubeplumbing/ (what they import, for the types); beside each module it writes its C extension, which Python imports before the .py, and
# the runtime they share (*__mypyc*.so) at the top of the directory. The .py files stay the source of
# truth: the tests run them, and tests/integration/test_compiled_core.py runs the decision core's tests
# again on the compiled modules. Measured side by side at 5,000 nodes: 0.89x the CPU per review.
#
#   images/webhook/compile-core.sh MYPYC      (MYPYC: the mypyc command of a Python with mypy installed)
#
# Used by images/webhook/Dockerfile and devplatform/compiled_core.py (the benchmark runs what ships).
set -eu
mypyc=${1:?usage: compile-core.sh MYPYC}
# No mypy configuration of the project's here: the copies are compiled as they are; `make lint` checks them.
"$mypyc" \
  webhook/types.py \
  webhook/budget.py \
  webhook/walltime.py \
  webhook/resources.py \
  webhook/scheduling.py \
  webhook/model.py \
  webhook/reasons.py \
  webhook/fitting.py \
  webhook/room.py \
  webhook/accounting.py \
  webhook/reservations.py \
  webhook/provenance.py \
  webhook/spending.py \
  webhook/spend_ledger.py \
  webhook/namespace_index.py \
  webhook/node_index.py \
  webhook/job_moves.py \
  webhook/cache.py \
  webhook/sync.py \
  webhook/gangs.py \
  webhook/gang_decision.py \
  webhook/waiting.py \
  webhook/machine_terms.py \
  webhook/data_volumes.py \
  webhook/placement.py \
  webhook/burst.py \
  webhook/verdict.py \
  webhook/decision.py \
  webhook/gpu_models.py \
  webhook/gpu_model_patch.py \
  webhook/json_patch.py \
  webhook/rewrite_terms.py \
  webhook/grace_period.py \
  webhook/burst_containers.py \
  webhook/mutation.py \
  webhook/overreach.py \
  webhook/review.py \
  webhook/responses.py \
  webhook/admission.py
rm -rf build
