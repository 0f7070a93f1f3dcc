package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Client talks to a running agent over its unix socket.
type Client struct {
	socket string
	hc     *http.Client
}

// NewClient returns a client for the agent listening on socket.
func NewClient(socket string) *Client {
	return &Client{
		socket: socket,
		hc: &http.Client{
			Timeout: 10 * time.Second,
			Transport: &http.Transport{
				DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
					var d net.Dialer
					return d.DialContext(ctx, "unix", socket)
				},
			},
		},
	}
}

// do sends one request and checks that the agent answered want; the
// caller closes the body.
func (c *Client) do(ctx context.Context, hc *http.Client, method, path string, want int) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, "http://volumed"+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		// The socket is 0600: anyone but root is refused by the kernel,
		// and no retry changes that.
		if errors.Is(err, fs.ErrPermission) {
			return nil, fmt.Errorf("permission denied: the volumed socket %s is root-only; run as root: %w", c.socket, err)
		}
		return nil, fmt.Errorf("talk to volumed at %s (is `volumed run` running?): %w", c.socket, err)
	}
	if resp.StatusCode != want {
		defer resp.Body.Close()
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		m := strings.TrimSpace(string(msg))
		if resp.StatusCode == http.StatusNotFound && m == "404 page not found" {
			// net/http's answer for a path it does not route: an agent
			// older than the endpoint (an upgrade under way).
			return nil, fmt.Errorf("volumed at %s answered %s: %w", c.socket, resp.Status, errNotFound)
		}
		if m != "" {
			return nil, fmt.Errorf("volumed at %s answered %s: %s", c.socket, resp.Status, m)
		}
		return nil, fmt.Errorf("volumed at %s answered %s", c.socket, resp.Status)
	}
	return resp, nil
}

// errNotFound: the agent does not serve the path asked for.
var errNotFound = errors.New("no such endpoint")

// Status fetches the agent's view of every volume.
func (c *Client) Status(ctx context.Context) (*Status, error) {
	return c.status(c.do(ctx, c.hc, http.MethodGet, "/v1/status", http.StatusOK))
}

// status decodes a status reply.
func (c *Client) status(resp *http.Response, err error) (*Status, error) {
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var st Status
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return nil, fmt.Errorf("decode status from %s: %w", c.socket, err)
	}
	return &st, nil
}

// ErrNoWait is WaitReady's error from an agent without GET /v1/wait
// (older than this client): poll Status instead.
var ErrNoWait = errors.New("the agent has no wait endpoint")

// WaitReady asks the agent to answer once every named volume is usable
// (NotReady) or window has passed, and returns the status of the named
// volumes then. The agent wakes it after a pass, so waiting costs no
// polling.
func (c *Client) WaitReady(ctx context.Context, names []string, window time.Duration) (*Status, error) {
	q := url.Values{"volume": names, "timeout": {window.String()}}
	hc := *c.hc
	hc.Timeout = window + 10*time.Second
	resp, err := c.do(ctx, &hc, http.MethodGet, "/v1/wait?"+q.Encode(), http.StatusOK)
	if errors.Is(err, errNotFound) {
		return nil, ErrNoWait
	}
	return c.status(resp, err)
}

// ShutdownNetwork asks the agent to tear down its network volumes
// (unpublish, unmount, log out / disconnect) and keep them down until it
// exits, and waits until that is done or ctx ends.
func (c *Client) ShutdownNetwork(ctx context.Context) (*ShutdownReply, error) {
	hc := *c.hc
	hc.Timeout = 0 // bounded by ctx: a teardown may take longer than a status read
	resp, err := c.do(ctx, &hc, http.MethodPost, "/v1/shutdown-network", http.StatusOK)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var r ShutdownReply
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return nil, fmt.Errorf("decode reply from %s: %w", c.socket, err)
	}
	return &r, nil
}

// RecoveryKey has the agent enrol a new recovery key in volume name's
// LUKS2 header and returns it.
func (c *Client) RecoveryKey(ctx context.Context, name string) (string, error) {
	hc := *c.hc
	hc.Timeout = 0 // bounded by ctx: a Tang key may be waited for
	resp, err := c.do(ctx, &hc, http.MethodPost, "/v1/volumes/"+url.PathEscape(name)+"/recovery-key", http.StatusOK)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var r RecoveryKeyReply
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return "", fmt.Errorf("decode reply from %s: %w", c.socket, err)
	}
	return r.Key, nil
}

// ResumeNetwork undoes ShutdownNetwork.
func (c *Client) ResumeNetwork(ctx context.Context) error {
	resp, err := c.do(ctx, c.hc, http.MethodPost, "/v1/resume-network", http.StatusNoContent)
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}
