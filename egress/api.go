package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// protoVersion is what GET /v1/health reports; sbx compares it to the one it speaks.
const protoVersion = "1"

const maxBodyBytes = 1 << 20

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func writeErr(w http.ResponseWriter, err error) {
	var he *httpError
	if errors.As(err, &he) {
		writeJSON(w, he.status, map[string]string{"error": he.msg})
		return
	}
	writeJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
}

func (s *server) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/health", func(w http.ResponseWriter, r *http.Request) {
		if err := s.health(); err != nil {
			// A pod's one box not in force: not ready (its box must not start). A node's: the
			// other boxes are, and sbx must keep driving the helper (its next PUT of that box
			// is what installs it again), so the answer says so without failing.
			status := http.StatusServiceUnavailable
			if !s.cfg.pod {
				status = 200
			}
			writeJSON(w, status, map[string]string{"version": protoVersion, "error": err.Error()})
			return
		}
		writeJSON(w, 200, map[string]string{"version": protoVersion})
	})
	mux.HandleFunc("GET /v1/boxes", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, s.list())
	})
	mux.HandleFunc("GET /v1/boxes/{id}", func(w http.ResponseWriter, r *http.Request) {
		v, ok := s.get(r.PathValue("id"))
		if !ok {
			writeJSON(w, 404, map[string]string{"error": "no such box"})
			return
		}
		writeJSON(w, 200, v)
	})
	mux.HandleFunc("PUT /v1/boxes/{id}", func(w http.ResponseWriter, r *http.Request) {
		var body PutBody
		if err := decodeStrict(http.MaxBytesReader(w, r.Body, maxBodyBytes), &body); err != nil {
			writeErr(w, badRequest("%v", err))
			return
		}
		b, err := s.compileBoxInput(r.PathValue("id"), &body)
		if err != nil {
			writeErr(w, err)
			return
		}
		if err := s.put(b); err != nil {
			log.Printf("PUT %s: %v", b.id, err)
			writeErr(w, err)
			return
		}
		writeJSON(w, 200, struct{}{})
	})
	mux.HandleFunc("DELETE /v1/boxes/{id}", func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		if !validID(id) {
			writeErr(w, badRequest("box id must match [a-zA-Z0-9_.-]{1,128}"))
			return
		}
		if err := s.remove(id); err != nil {
			log.Printf("DELETE %s: %v", id, err)
			writeErr(w, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	return mux
}

// serveAPI listens on dir/egress.sock (mode 0600: only root on the host reaches it) and serves
// until the listener closes.
func (s *server) serveAPI(sock string) (*http.Server, error) {
	os.Remove(sock)
	old := syscall.Umask(0o177)
	ln, err := net.Listen("unix", sock)
	syscall.Umask(old)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(sock, 0o600); err != nil {
		ln.Close()
		return nil, err
	}
	srv := &http.Server{
		Handler:           s.handler(),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          log.New(io.Discard, "", 0),
	}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Printf("api: %v", err)
		}
	}()
	return srv, nil
}

func socketPath() string {
	if p := os.Getenv("SBX_EGRESS_SOCKET"); p != "" {
		return p
	}
	return filepath.Join(stateDir(), "egress.sock")
}

// call is `sbx-egress call METHOD PATH`: the API for `docker exec` / `kubectl exec`, body on
// stdin (PUT, POST), response body on stdout, exit 0 on 2xx, else 1 with the error on stderr.
func call(args []string) int {
	if len(args) != 2 || !strings.HasPrefix(args[1], "/") {
		fmt.Fprintln(os.Stderr, "usage: sbx-egress call METHOD /PATH (body on stdin)")
		return 2
	}
	method := strings.ToUpper(args[0])
	var body io.Reader
	if method == "PUT" || method == "POST" {
		data, err := io.ReadAll(io.LimitReader(os.Stdin, maxBodyBytes+1))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		body = strings.NewReader(string(data))
	}
	status, out, err := request(method, args[1], body)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if status < 200 || status > 299 {
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(out, &e) == nil && e.Error != "" {
			fmt.Fprintf(os.Stderr, "%d: %s\n", status, e.Error)
		} else {
			fmt.Fprintf(os.Stderr, "%d: %s\n", status, strings.TrimSpace(string(out)))
		}
		return 1
	}
	os.Stdout.Write(out)
	return 0
}

func request(method, path string, body io.Reader) (int, []byte, error) {
	sock := socketPath()
	client := &http.Client{
		Timeout: 60 * time.Second,
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		}},
	}
	req, err := http.NewRequest(method, "http://sbx-egress"+path, body)
	if err != nil {
		return 0, nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	return resp.StatusCode, out, err
}
