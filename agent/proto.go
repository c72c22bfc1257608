package main

// The wire protocol between the host (src/runtime/agent-client.ts) and the agent, over one
// connection per exec to the TCP listener (Docker: the box's bridge address; Kubernetes: through
// the port-forward). See docs/agent.md.
//
// Every frame: 1 byte type, 4 bytes big-endian payload length, payload (at most maxFrame).

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
)

// ProtocolVersion is the one version this agent speaks. A host that offers no version this
// agent speaks gets an ERROR frame with code "version" naming it, then the connection closes.
const ProtocolVersion = 1

// AgentVersion names the build in the HELLO reply.
const AgentVersion = "0.1.0"

const maxFrame = 1 << 20

// Host -> agent.
const (
	fHello    = 0x01 // JSON helloReq
	fStart    = 0x02 // JSON startReq
	fStdin    = 0x03 // bytes for the process's stdin
	fStdinEOF = 0x04 // close stdin (with a tty: send ^D)
	fResize   = 0x05 // JSON {cols, rows}
	fKill     = 0x06 // kill the exec: its group, then everything descended from it
	fSignal   = 0x07 // JSON {signal}: send one signal to the process (not used by the host yet)
	// fConfigure, instead of START: JSON {env}, variables every later exec gets and the heartbeat
	// reads (a warm spare learns the identity of the box it became). Answered by CONFIGURED.
	fConfigure = 0x08
)

// Agent -> host.
const (
	fHelloOK    = 0x81 // JSON helloResp
	fStarted    = 0x82 // JSON {pid}
	fStdout     = 0x83 // bytes
	fStderr     = 0x84 // bytes
	fExit       = 0x85 // JSON exitResp; the last frame
	fError      = 0x86 // JSON errorResp; the last frame
	fStdinAck   = 0x87 // 4 bytes big-endian: that many stdin bytes were written to the process
	fConfigured = 0x88 // JSON {}; the last frame
)

// stdinWindow is how many stdin bytes the host may send before the agent acknowledges them.
const stdinWindow = 256 * 1024

type helloReq struct {
	Versions []int  `json:"versions"`
	Client   string `json:"client,omitempty"`
	// Token: the box's secret ($SBX_AGENT_TOKEN), which every connection must present, as it is
	// (Kubernetes, through the port-forward) or as Proof.
	Token string `json:"token,omitempty"`
	// Proof: helloProof(token, the address the host dialled) in place of the token (Docker), so
	// that the token itself never goes on the wire: whoever holds an address the host still
	// thinks is the box's (another container, after a restart behind the host's back) learns
	// nothing it can use at the box's own address.
	Proof string `json:"proof,omitempty"`
}

type helloResp struct {
	Version  int    `json:"version"`
	Versions []int  `json:"versions"`
	Agent    string `json:"agent"`
	Pid      int    `json:"pid"`
}

type startReq struct {
	Argv    []string          `json:"argv"`
	Env     map[string]string `json:"env,omitempty"`
	WorkDir string            `json:"workDir,omitempty"`
	User    string            `json:"user,omitempty"`
	Tty     bool              `json:"tty,omitempty"`
	Cols    int               `json:"cols,omitempty"`
	Rows    int               `json:"rows,omitempty"`
	Stdin   bool              `json:"stdin,omitempty"`
}

type sizeReq struct {
	Cols int `json:"cols"`
	Rows int `json:"rows"`
}

type exitResp struct {
	ExitCode int    `json:"exitCode"`
	Signal   string `json:"signal,omitempty"`
	Killed   bool   `json:"killed,omitempty"`
}

type errorResp struct {
	Code    string `json:"code"`
	Field   string `json:"field,omitempty"`
	Message string `json:"message"`
}

type frame struct {
	typ     byte
	payload []byte
}

func readFrame(r io.Reader, hdr []byte) (frame, error) {
	if _, err := io.ReadFull(r, hdr[:5]); err != nil {
		return frame{}, err
	}
	n := binary.BigEndian.Uint32(hdr[1:5])
	if n > maxFrame {
		return frame{}, fmt.Errorf("frame of %d bytes is over the %d limit", n, maxFrame)
	}
	p := make([]byte, n)
	if _, err := io.ReadFull(r, p); err != nil {
		return frame{}, err
	}
	return frame{typ: hdr[0], payload: p}, nil
}

// frameWriter serializes frames from several goroutines onto one connection. A write blocks
// while the host is not reading: that is the output's backpressure.
type frameWriter struct {
	mu     sync.Mutex
	w      io.Writer
	closed bool
}

var errWriterClosed = errors.New("connection closed")

func (fw *frameWriter) write(typ byte, payload []byte) error {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	if fw.closed {
		return errWriterClosed
	}
	hdr := make([]byte, 5, 5+len(payload))
	hdr[0] = typ
	binary.BigEndian.PutUint32(hdr[1:], uint32(len(payload)))
	// One write per frame: small frames leave in one segment.
	if _, err := fw.w.Write(append(hdr, payload...)); err != nil {
		fw.closed = true
		return err
	}
	return nil
}

func (fw *frameWriter) writeJSON(typ byte, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return fw.write(typ, b)
}
