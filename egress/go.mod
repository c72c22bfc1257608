module sbx/egress

// 1.24, not the agent's 1.22: golang.org/x/net v0.49.0 declares go 1.24.0, and the go command
// refuses a dependency that needs a newer language version than the main module's.
go 1.24.0

// The one dependency: golang.org/x/net/dns/dnsmessage, the DNS message parser and builder the Go
// project keeps beside the standard library (net's own resolver vendors this same package as
// vendor/golang.org/x/net/dns/dnsmessage). Parsing untrusted DNS from boxes and upstreams with a
// well-kept, fuzzed parser beats writing one; nothing else of x/net is imported.
require golang.org/x/net v0.49.0
