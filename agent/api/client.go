package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
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

// Status fetches the agent's view of every volume.
func (c *Client) Status(ctx context.Context) (*Status, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://volumed/v1/status", nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("talk to volumed at %s (is `volumed run` running?): %w", c.socket, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("volumed at %s answered %s", c.socket, resp.Status)
	}
	var st Status
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return nil, fmt.Errorf("decode status from %s: %w", c.socket, err)
	}
	return &st, nil
}

// ShutdownNetwork asks the agent to tear down its network volumes
// (unpublish, unmount, log out / disconnect) and keep them down until it
// exits, and waits until that is done or ctx ends.
func (c *Client) ShutdownNetwork(ctx context.Context) (*ShutdownReply, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://volumed/v1/shutdown-network", nil)
	if err != nil {
		return nil, err
	}
	hc := *c.hc
	hc.Timeout = 0 // bounded by ctx: a teardown may take longer than a status read
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("talk to volumed at %s (is `volumed run` running?): %w", c.socket, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("volumed at %s answered %s", c.socket, resp.Status)
	}
	var r ShutdownReply
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return nil, fmt.Errorf("decode reply from %s: %w", c.socket, err)
	}
	return &r, nil
}

// ResumeNetwork undoes ShutdownNetwork.
func (c *Client) ResumeNetwork(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://volumed/v1/resume-network", nil)
	if err != nil {
		return err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("talk to volumed at %s (is `volumed run` running?): %w", c.socket, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		return fmt.Errorf("volumed at %s answered %s", c.socket, resp.Status)
	}
	return nil
}
