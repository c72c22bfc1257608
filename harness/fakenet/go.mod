// The fake internet of the egress tests (scripts/fakenet.sh): the servers run in the sbx-inet
// network namespace; nettool is the static client boxes use. Test harness code, not shipped.
module sbx/fakenet

go 1.26.0

require golang.org/x/net v0.49.0
