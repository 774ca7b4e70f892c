// Package etcdtest starts real etcd servers for tests, bound to 127.0.0.1:
// an embedded cluster of any size (go.etcd.io/etcd/server/v3/embed) and a
// single member from an etcd binary on PATH (Debian's etcd-server).
package etcdtest

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

// Cluster is a running embedded etcd cluster.
type Cluster struct {
	members []*embed.Etcd
	clients []string
}

// StartCluster starts an n-member embedded etcd cluster and stops it when
// the test ends. Ports are picked free and may be taken by another process
// before etcd binds them; then it starts over on new ports.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	for attempt := 1; ; attempt++ {
		c, err := startCluster(t, n)
		if err == nil {
			t.Cleanup(c.close)
			for _, e := range c.members {
				select {
				case <-e.Server.ReadyNotify():
				case <-time.After(30 * time.Second):
					t.Fatalf("etcdtest: cluster not ready after 30s")
				}
			}
			return c
		}
		if !strings.Contains(err.Error(), "address already in use") || attempt == 5 {
			t.Fatalf("etcdtest: %v", err)
		}
	}
}

func startCluster(t testing.TB, n int) (*Cluster, error) {
	dir := t.TempDir()
	cfgs := make([]*embed.Config, n)
	var initial []string
	for i := range cfgs {
		cfg := embed.NewConfig()
		cfg.Name = fmt.Sprintf("m%d", i)
		cfg.Dir = filepath.Join(dir, cfg.Name)
		peer := mustURL(t, "http://"+freeAddr(t))
		client := mustURL(t, "http://"+freeAddr(t))
		cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*peer}, []url.URL{*peer}
		cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*client}, []url.URL{*client}
		cfg.LogLevel = "error"
		cfg.UnsafeNoFsync = true
		cfg.InitialClusterToken = "etcdtest"
		cfgs[i] = cfg
		initial = append(initial, cfg.Name+"="+peer.String())
	}
	c := &Cluster{}
	for _, cfg := range cfgs {
		cfg.InitialCluster = strings.Join(initial, ",")
		cfg.ClusterState = embed.ClusterStateFlagNew
	}
	// Members wait for each other, so start them all before waiting.
	for _, cfg := range cfgs {
		e, err := embed.StartEtcd(cfg)
		if err != nil {
			c.close()
			return nil, fmt.Errorf("start %s: %w", cfg.Name, err)
		}
		c.members = append(c.members, e)
		c.clients = append(c.clients, cfg.AdvertiseClientUrls[0].String())
	}
	return c, nil
}

// Endpoints returns the client URLs of every member.
func (c *Cluster) Endpoints() []string { return append([]string(nil), c.clients...) }

// Stop stops member i abruptly (as a crash would, without leaving the
// cluster).
func (c *Cluster) Stop(i int) {
	if c.members[i] != nil {
		c.members[i].Server.HardStop()
		c.members[i].Close()
		c.members[i] = nil
	}
}

func (c *Cluster) close() {
	for i := range c.members {
		c.Stop(i)
	}
}

// Binary is an etcd process started from a binary.
type Binary struct {
	cmd      *exec.Cmd
	endpoint string
}

// BinaryPath returns the etcd binary tests should start: $ETCD_BIN, or
// etcd on PATH, or "" when there is none.
func BinaryPath() string {
	if p := os.Getenv("ETCD_BIN"); p != "" {
		return p
	}
	if p, err := exec.LookPath("etcd"); err == nil {
		return p
	}
	return ""
}

// StartBinary starts a single-member etcd from BinaryPath and stops it when
// the test ends. It skips the test when no binary is installed, unless
// COUCHEPI_REQUIRE_ETCD_BINARY is set (CI installs Debian's etcd-server and
// sets it, so a missing binary fails there).
func StartBinary(t testing.TB) *Binary {
	t.Helper()
	bin := BinaryPath()
	if bin == "" {
		msg := "etcdtest: no etcd binary (apt-get install etcd-server, or set ETCD_BIN)"
		if os.Getenv("COUCHEPI_REQUIRE_ETCD_BINARY") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	dir := t.TempDir()
	peer, client := "http://"+freeAddr(t), "http://"+freeAddr(t)
	cmd := exec.Command(bin,
		"--name", "bin0", "--data-dir", filepath.Join(dir, "data"),
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--initial-cluster", "bin0="+peer, "--log-level", "error")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("etcdtest: start %s: %v", bin, err)
	}
	b := &Binary{cmd: cmd, endpoint: client}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	deadline := time.Now().Add(30 * time.Second)
	for {
		conn, err := net.DialTimeout("tcp", strings.TrimPrefix(client, "http://"), time.Second)
		if err == nil {
			conn.Close()
			return b
		}
		if time.Now().After(deadline) {
			t.Fatalf("etcdtest: %s not listening on %s after 30s", bin, client)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Endpoint returns the binary's client URL.
func (b *Binary) Endpoint() string { return b.endpoint }

// Version returns what the binary prints for --version.
func Version(bin string) string {
	out, _ := exec.Command(bin, "--version").Output()
	return strings.TrimSpace(strings.SplitN(string(out), "\n", 2)[0])
}

func freeAddr(t testing.TB) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func mustURL(t testing.TB, s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}
