package main

// The wire protocol between the host (src/runtime/agent-client.ts) and the agent, over a
// connection per exec to the TCP listener (Docker: the box's bridge address; Kubernetes: through
// the port-forward), or several execs one after another on one connection when each START says
// keep (the host sends a HELLO with each next START, answered by HELLO_OK before the START is read). See docs/agent.md.
//
// Every frame: 1 byte type, 4 bytes big-endian payload length, payload (at most maxFrame).

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
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
	// Keep: after this exec's EXIT the connection stays open for another START (no HELLO
	// again); without it the agent half-closes after EXIT, as an agent that predates it does.
	Keep bool `json:"keep,omitempty"`
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
	var err error
	if len(payload) <= smallFrame {
		// One write per frame: a small frame leaves in one segment.
		var b [5 + smallFrame]byte
		putHeader(b[:5], typ, len(payload))
		_, err = fw.w.Write(b[:5+copy(b[5:], payload)])
	} else {
		// Header and payload in one writev on a TCP connection, without copying the payload
		// (64 KiB of output a read) into a new buffer first.
		var hdr [5]byte
		putHeader(hdr[:], typ, len(payload))
		bufs := net.Buffers{hdr[:], payload}
		_, err = bufs.WriteTo(fw.w)
	}
	if err != nil {
		fw.closed = true
		return err
	}
	return nil
}

// smallFrame: frames up to this payload are copied behind their header into one stack buffer.
const smallFrame = 512

func putHeader(b []byte, typ byte, n int) {
	b[0] = typ
	binary.BigEndian.PutUint32(b[1:5], uint32(n))
}

func (fw *frameWriter) writeJSON(typ byte, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return fw.write(typ, b)
}
