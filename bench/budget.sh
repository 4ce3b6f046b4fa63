# Sourced by the device-call scripts (run_gpu.sh, finetune_bench.sh, ddp_bench.sh) after they set DEADLINE (Unix
# seconds: the end of their budget, less what their report needs) and, for step, NOTES (a file of notes for the
# report).

# The seconds left before DEADLINE.
left() { echo $((DEADLINE - $(date +%s))); }

# step NAME CAP_SECONDS LOG COMMAND...: COMMAND within CAP_SECONDS and the time left, its output in LOG (and its
# tail here); what did not run, failed or ran past its time is a line in NOTES. Returns COMMAND's status.
step() {
  local name=$1 cap=$2 log=$3 t; shift 3
  t=$(left)
  [ "$cap" -lt "$t" ] && t=$cap
  if [ "$t" -le 5 ]; then echo "- $name: not run, out of time" >> "$NOTES"; return 1; fi
  echo "== $name (limit $t s, $(left) s left)"
  timeout -k 5 "$t" "$@" > "$log" 2>&1
  local status=$?
  tail -n 4 "$log"
  if [ $status -ne 0 ]; then echo "- $name: exit status $status$([ $status -ge 124 ] && echo ', past its time limit'): $(tail -n 1 "$log")" >> "$NOTES"; fi
  return $status
}
