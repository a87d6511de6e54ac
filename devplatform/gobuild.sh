# Sourced by the Go build scripts (control plane, cert-manager, helm/promtool): one `go build` in the
# background with a progress line every 15 s (a cold build takes minutes and must not look hung),
# and the log's last lines when it fails.
#
# go_build_with_progress PROGRESS_LABEL FAILURE_LABEL START LOG WRAP_DIR GO_BUILD_ARGS...
#   START: the caller's `date +%s`, so the elapsed times count from where the caller started.
#   Returns non-zero after printing the log's tail when the build fails; removes LOG when it succeeds.
go_build_with_progress() {
  local progress_label=$1 failure_label=$2 start=$3 log=$4 wrap=$5
  shift 5
  (
    cd "$wrap"
    CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS=-mod=mod go build -v -trimpath "$@" >"$log" 2>&1
  ) &
  local pid=$! n
  while kill -0 "$pid" 2>/dev/null; do
    sleep 15
    if kill -0 "$pid" 2>/dev/null; then
      n=$(grep -vc '^go: downloading' "$log" || true)
      echo "  building $progress_label: $(( $(date +%s) - start ))s elapsed, $n packages compiled" >&2
    fi
  done
  if ! wait "$pid"; then
    echo "$failure_label build FAILED after $(( $(date +%s) - start ))s; last lines of the log:" >&2
    grep -v '^go: downloading' "$log" | tail -30 >&2
    return 1
  fi
  rm -f "$log"
}
