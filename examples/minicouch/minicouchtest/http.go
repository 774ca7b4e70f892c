package minicouchtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// requestTimeout bounds one request of the helpers below.
const requestTimeout = 60 * time.Second

// Do sends one request as the admin. path is relative to the server root
// ("/db/doc" or "db/doc"); body is nil, a string, a []byte or a value
// encoded as JSON. It returns the status and the body with surrounding
// white space trimmed.
func (s *Server) Do(method, path string, body any) (int, []byte, error) {
	return s.DoAs(s.User, s.Pass, method, path, body)
}

// DoAs is Do as another user; user "" sends no credentials.
func (s *Server) DoAs(user, pass, method, path string, body any) (int, []byte, error) {
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		if b != "" {
			rd = strings.NewReader(b)
		}
	case []byte:
		rd = bytes.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			return 0, nil, err
		}
		rd = bytes.NewReader(j)
	}
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, s.URL+strings.TrimPrefix(path, "/"), rd)
	if err != nil {
		return 0, nil, err
	}
	if user != "" {
		req.SetBasicAuth(user, pass)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	return resp.StatusCode, bytes.TrimSpace(out), err
}

// JSON sends a request as the admin and decodes the JSON answer into out
// (unless out is nil); it fails t when the request fails or the body does
// not decode, and returns the status.
func (s *Server) JSON(t testing.TB, method, path string, body, out any) int {
	t.Helper()
	st, b, err := s.Do(method, path, body)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: %d %s: %v", method, path, st, b, err)
		}
	}
	return st
}

// PluginPID returns the pid `GET /_node/_local/_plugins` reports for the
// named plugin while it is running, else 0.
func (s *Server) PluginPID(name string) (int, error) {
	_, body, err := s.Do("GET", "/_node/_local/_plugins", nil)
	if err != nil {
		return 0, err
	}
	var list []struct {
		Name  string `json:"name"`
		PID   int    `json:"pid"`
		State string `json:"state"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		return 0, fmt.Errorf("_plugins: %v: %s", err, body)
	}
	for _, p := range list {
		if p.Name == name && p.State == "running" {
			return p.PID, nil
		}
	}
	return 0, nil
}
