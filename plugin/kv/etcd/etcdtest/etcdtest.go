// Package etcdtest starts real etcd servers for tests, bound to 127.0.0.1:
// an embedded cluster of any size (go.etcd.io/etcd/server/v3/embed), in
// the test's process or each member in a process of its own, and a single
// member from an etcd binary on PATH (Debian's etcd-server). It is public,
// as net/http/httptest is, so that a program using kv/etcd can test
// against a real etcd the way this repository does.
package etcdtest

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/couchepi/couchepi/internal/childproc"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// Cluster is a running embedded etcd cluster.
type Cluster struct {
	members []*embed.Etcd // in the test's process
	procs   []*exec.Cmd   // or each in its own
	configs []member      // of the process members, to start them again
	clients []string
	t       testing.TB
	dirs    []string
}

// StartCluster starts an n-member embedded etcd cluster and stops it when
// the test ends. Ports are picked free and may be taken by another process
// before etcd binds them; then it starts over on new ports.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	return StartClusterWith(t, n, nil)
}

// StartClusterWith is StartCluster with configure (when not nil) applied
// to each member's configuration, e.g. to lower MaxRequestBytes.
func StartClusterWith(t testing.TB, n int, configure func(*embed.Config)) *Cluster {
	t.Helper()
	for attempt := 1; ; attempt++ {
		c, err := startCluster(t, n, configure)
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

// member is what a member needs to start: it travels to a member's own
// process as JSON in memberEnv.
type member struct {
	Name, Dir, Peer, Client, InitialCluster string
}

// memberEnv, set in a process's environment, makes ServeMember run the
// member it describes.
const memberEnv = "COUCHEPI_ETCDTEST_MEMBER"

func (m member) config() (*embed.Config, error) {
	cfg := embed.NewConfig()
	cfg.Name, cfg.Dir = m.Name, m.Dir
	peer, err := url.Parse(m.Peer)
	if err != nil {
		return nil, err
	}
	client, err := url.Parse(m.Client)
	if err != nil {
		return nil, err
	}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*peer}, []url.URL{*peer}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*client}, []url.URL{*client}
	cfg.LogLevel = "error"
	cfg.UnsafeNoFsync = true
	cfg.InitialClusterToken = "etcdtest"
	cfg.InitialCluster = m.InitialCluster
	cfg.ClusterState = embed.ClusterStateFlagNew
	return cfg, nil
}

func newMembers(t testing.TB, n int) []member {
	dir := t.TempDir()
	ms := make([]member, n)
	var initial []string
	for i := range ms {
		ms[i] = member{Name: fmt.Sprintf("m%d", i), Peer: "http://" + freeAddr(t), Client: "http://" + freeAddr(t)}
		ms[i].Dir = filepath.Join(dir, ms[i].Name)
		initial = append(initial, ms[i].Name+"="+ms[i].Peer)
	}
	for i := range ms {
		ms[i].InitialCluster = strings.Join(initial, ",")
	}
	return ms
}

func startCluster(t testing.TB, n int, configure func(*embed.Config)) (*Cluster, error) {
	ms := newMembers(t, n)
	cfgs := make([]*embed.Config, n)
	for i, m := range ms {
		var err error
		if cfgs[i], err = m.config(); err != nil {
			return nil, err
		}
		if configure != nil {
			configure(cfgs[i])
		}
	}
	c := &Cluster{t: t}
	// Members wait for each other, so start them all before waiting.
	for _, cfg := range cfgs {
		e, err := embed.StartEtcd(cfg)
		if err != nil {
			c.close()
			return nil, fmt.Errorf("start %s: %w", cfg.Name, err)
		}
		c.members = append(c.members, e)
		c.clients = append(c.clients, cfg.AdvertiseClientUrls[0].String())
		c.dirs = append(c.dirs, cfg.Dir)
	}
	return c, nil
}

// StartProcessCluster starts an n-member cluster as StartCluster does, but
// each member in a process of its own (the test binary run again), so that
// the members' CPU, memory and garbage collection are not the test's: as
// in production, where etcd runs apart from the nodes. The test binary's
// TestMain must call ServeMember first.
func StartProcessCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatalf("etcdtest: %v", err)
	}
	c := &Cluster{t: t}
	t.Cleanup(c.close)
	for _, m := range newMembers(t, n) {
		cmd, err := startMember(self, m)
		if err != nil {
			t.Fatalf("etcdtest: start member %s: %v", m.Name, err)
		}
		c.procs = append(c.procs, cmd)
		c.configs = append(c.configs, m)
		c.clients = append(c.clients, m.Client)
		c.dirs = append(c.dirs, m.Dir)
	}
	for _, ep := range c.clients {
		waitListening(t, ep)
	}
	return c
}

// startMember runs member m in a process of its own (the binary self).
func startMember(self string, m member) (*exec.Cmd, error) {
	arg, _ := json.Marshal(m)
	cmd := exec.Command(self, "-test.run=^$")
	cmd.Env = append(os.Environ(), memberEnv+"="+string(arg))
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	childproc.DieWithParent(cmd)
	return cmd, cmd.Start()
}

// Restart starts member i of a process cluster again, on its data
// directory and addresses, after Stop (a crashed member coming back).
func (c *Cluster) Restart(i int) {
	c.t.Helper()
	if c.configs == nil {
		c.t.Fatal("etcdtest: Restart needs a process cluster (StartProcessCluster)")
	}
	if c.procs[i] != nil {
		c.t.Fatalf("etcdtest: member %d is running", i)
	}
	self, err := os.Executable()
	if err != nil {
		c.t.Fatalf("etcdtest: %v", err)
	}
	cmd, err := startMember(self, c.configs[i])
	if err != nil {
		c.t.Fatalf("etcdtest: restart member %d: %v", i, err)
	}
	c.procs[i] = cmd
	waitListening(c.t, c.clients[i])
}

// Leader returns the index of the member that leads the cluster, -1 when
// no running member knows one.
func (c *Cluster) Leader() int {
	ids := map[uint64]int{}
	var leader uint64
	for i, ep := range c.clients {
		if c.procs != nil && c.procs[i] == nil || c.members != nil && c.members[i] == nil {
			continue
		}
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		st, err := cli.Status(ctx, ep)
		cancel()
		cli.Close()
		if err != nil {
			continue
		}
		ids[st.Header.MemberId] = i
		if st.Leader != 0 {
			leader = st.Leader
		}
	}
	if i, ok := ids[leader]; ok && leader != 0 {
		return i
	}
	return -1
}

// ServeMember runs the etcd member described in the environment by
// StartProcessCluster, until the process is killed, and returns at once
// in any other process. Call it first in TestMain.
func ServeMember() {
	arg := os.Getenv(memberEnv)
	if arg == "" {
		return
	}
	var m member
	if err := json.Unmarshal([]byte(arg), &m); err != nil {
		fmt.Fprintf(os.Stderr, "etcdtest: %s: %v\n", memberEnv, err)
		os.Exit(2)
	}
	cfg, err := m.config()
	var e *embed.Etcd
	if err == nil {
		e, err = embed.StartEtcd(cfg)
	}
	if err == nil {
		err = <-e.Err() // runs until killed, or fails
	}
	fmt.Fprintf(os.Stderr, "etcdtest: member %s: %v\n", m.Name, err)
	os.Exit(1)
}

// Endpoints returns the client URLs of every member.
func (c *Cluster) Endpoints() []string { return append([]string(nil), c.clients...) }

// DataDirs returns the data directory of every member (its WAL, snapshots
// and the bbolt file member/snap/db), for tests that read what etcd keeps.
func (c *Cluster) DataDirs() []string { return append([]string(nil), c.dirs...) }

// Stop stops member i abruptly (as a crash would, without leaving the
// cluster).
func (c *Cluster) Stop(i int) {
	if c.procs != nil {
		if c.procs[i] != nil {
			c.procs[i].Process.Kill()
			c.procs[i].Wait()
			c.procs[i] = nil
		}
		return
	}
	if c.members[i] != nil {
		c.members[i].Server.HardStop()
		c.members[i].Close()
		c.members[i] = nil
	}
}

func (c *Cluster) close() {
	for i := range max(len(c.members), len(c.procs)) {
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
	childproc.DieWithParent(cmd)
	if err := cmd.Start(); err != nil {
		t.Fatalf("etcdtest: start %s: %v", bin, err)
	}
	b := &Binary{cmd: cmd, endpoint: client}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	waitListening(t, client)
	return b
}

// waitListening waits until something listens on the client URL.
func waitListening(t testing.TB, client string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		conn, err := net.DialTimeout("tcp", strings.TrimPrefix(client, "http://"), time.Second)
		if err == nil {
			conn.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("etcdtest: nothing listening on %s after 30s", client)
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
