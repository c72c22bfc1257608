package main

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
)

const defaultHeartbeatInterval = 30 * time.Second

// heartbeats sends the seed's heartbeat — POST {api}/v1/boxes/{id}/heartbeat with the box
// token, body {"active":true,"processCount":N} — every interval while user processes exist,
// and nothing while the box is idle. It needs SBX_API_URL, SBX_TOKEN and SBX_SANDBOX_ID in the
// box's environment, read at every tick (a warm spare gets them by CONFIGURE when it is
// claimed); SBX_HEARTBEAT_INTERVAL_MS changes the interval (tests).
func (a *agent) heartbeats() {
	interval := defaultHeartbeatInterval
	if v, err := strconv.Atoi(envValue(a.env(), "SBX_HEARTBEAT_INTERVAL_MS")); err == nil && v >= 10 {
		interval = time.Duration(v) * time.Millisecond
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	warned := ""
	for range t.C {
		env := a.env()
		api, token, id := envValue(env, "SBX_API_URL"), envValue(env, "SBX_TOKEN"), envValue(env, "SBX_SANDBOX_ID")
		if api == "" || token == "" || id == "" {
			continue
		}
		u, err := url.Parse(strings.TrimRight(api, "/") + "/v1/boxes/" + url.PathEscape(id) + "/heartbeat")
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
			if warned != api {
				fmt.Fprintf(os.Stderr, "sbx-agent: SBX_API_URL %q is not an http(s) URL: no heartbeats\n", api)
				warned = api
			}
			continue
		}
		n := a.userProcessCount()
		if n == 0 {
			continue // idle: silent, so the box's idle timeout runs
		}
		body := fmt.Sprintf(`{"active":true,"processCount":%d}`, n)
		if err := post(u, token, body, interval); err != nil {
			fmt.Fprintf(os.Stderr, "sbx-agent: heartbeat: %v\n", err)
		}
	}
}

// userProcessCount counts the box's processes that are someone's work: not the agent, not
// the box's command (the seed's "init") and not the `sleep` it keeps running, not zombies.
func (a *agent) userProcessCount() int {
	main := int(a.mainPid.Load())
	self := os.Getpid()
	n := 0
	for pid, st := range readProcs() {
		if pid == self || pid == main || st.state == 'Z' {
			continue
		}
		if main > 0 && st.ppid == main && st.comm == "sleep" {
			continue
		}
		n++
	}
	return n
}

// post is a minimal HTTP/1.1 POST (net/http would double the binary's size).
func post(u *url.URL, token, body string, timeout time.Duration) error {
	host := u.Host
	if u.Port() == "" {
		if u.Scheme == "https" {
			host = net.JoinHostPort(u.Hostname(), "443")
		} else {
			host = net.JoinHostPort(u.Hostname(), "80")
		}
	}
	if timeout > 10*time.Second {
		timeout = 10 * time.Second
	}
	d := &net.Dialer{Timeout: timeout}
	var c net.Conn
	var err error
	if u.Scheme == "https" {
		c, err = tls.DialWithDialer(d, "tcp", host, &tls.Config{ServerName: u.Hostname()})
	} else {
		c, err = d.Dial("tcp", host)
	}
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	req := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		u.RequestURI(), u.Host, token, len(body), body)
	if _, err := c.Write([]byte(req)); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	parts := strings.SplitN(strings.TrimSpace(line), " ", 3)
	if len(parts) < 2 || !strings.HasPrefix(parts[1], "2") {
		return fmt.Errorf("server answered %q", strings.TrimSpace(line))
	}
	return nil
}
