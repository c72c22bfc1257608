# Prints each failed test of a node:test TAP stream with its YAML block (error, location, stack),
# for the end of a test run. A suite that failed only because a subtest did is left out: its
# subtest is printed. At most 60 lines per failure and 30 failures, so the summary stays a summary.
function flush() {
  if (name != "" && !subtests_only && shown < 30) {
    shown++
    print name
    for (i = 1; i <= n && i <= 60; i++) print block[i]
    if (n > 60) print indent "  (" n - 60 " more lines)"
  }
  name = ""; n = 0; subtests_only = 0
}
/^ *not ok / {
  flush()
  name = $0
  match($0, /^ */)
  indent = substr($0, 1, RLENGTH)
  next
}
name != "" {
  if ($0 == indent "  ...") { flush(); next }
  if ($0 ~ /failureType: 'subtestsFailed'/) subtests_only = 1
  # Stack frames of node itself say nothing about the test.
  if ($0 ~ /node:internal\/|node:async_hooks|\(<anonymous>\)$/) next
  block[++n] = $0
}
END {
  flush()
  if (shown == 30) print "(more failures than these 30: see the whole TAP output)"
}
