package main

import (
	"fmt"
	"net"
	"os"
	"strings"
)

// runHello speaks to an agent as the host would. target is tcp:HOST:PORT (or HOST:PORT), the
// token taken from $SBX_AGENT_TOKEN.
func runHello(target string, cmd []string) int {
	c, err := net.Dial("tcp", strings.TrimPrefix(target, "tcp:"))
	if err != nil {
		fmt.Printf("connect: %v\n", err)
		return 1
	}
	defer c.Close()
	fw := &frameWriter{w: c}
	_ = fw.writeJSON(fHello, helloReq{Versions: []int{ProtocolVersion}, Client: "sbx-agent hello", Token: os.Getenv(tokenEnv)})
	if len(cmd) > 0 {
		_ = fw.writeJSON(fStart, startReq{Argv: cmd})
	}
	hdr := make([]byte, 5)
	code := 1
	for {
		f, err := readFrame(c, hdr)
		if err != nil {
			return code
		}
		fmt.Printf("%#x %s\n", f.typ, f.payload)
		switch f.typ {
		case fError:
			return 3
		case fHelloOK:
			code = 0
			if len(cmd) == 0 {
				return 0
			}
		case fExit:
			return 0
		}
	}
}
