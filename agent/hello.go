package main

import (
	"fmt"
	"net"
)

func runHello(socket string, cmd []string) int {
	c, err := net.Dial("unix", socket)
	if err != nil {
		fmt.Printf("connect: %v\n", err)
		return 1
	}
	defer c.Close()
	fw := &frameWriter{w: c}
	_ = fw.writeJSON(fHello, helloReq{Versions: []int{ProtocolVersion}, Client: "sbx-agent hello"})
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
