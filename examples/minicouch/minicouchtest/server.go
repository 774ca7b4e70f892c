package minicouchtest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/couchepi/couchepi/internal/childproc"
)

// readyLine is what minicouch prints once it accepts requests.
const readyLine = "minicouch listening on "

// Options says how to run one minicouch.
type Options struct {
	// Bin is the minicouch binary; "" builds it from this tree.
	Bin string
	// Data is the data directory; "" makes a fresh one (t.TempDir, or for
	// StartProcess a temporary directory that Cleanup removes).
	Data string
	// Addr is host:port to listen on; "" picks a free 127.0.0.1 port.
	Addr string
	// Admin is the server admin as "user:pass"; "" means "admin:pass".
	Admin string
	// Config is ini text written to <data>/test.ini and passed with --config
	// ("" passes none).
	Config string
	// Plugins are plugin binaries, each passed with --plugin.
	Plugins []string
	// Fauxton is a Fauxton build directory passed with --fauxton.
	Fauxton string
	// Args are further command-line flags.
	Args []string
	// Dir is the process's working directory ("" = the test's).
	Dir string
	// Log, when set, also receives everything the server prints.
	Log io.Writer
	// StartTimeout bounds the wait for the listening line (default 60s).
	StartTimeout time.Duration
	// StopTimeout is how long Stop waits after SIGTERM before SIGKILL
	// (default 20s).
	StopTimeout time.Duration
}

// Server is a running (or stopped) minicouch process.
type Server struct {
	Addr     string // 127.0.0.1:port
	URL      string // http://127.0.0.1:port/ (no credentials)
	AdminURL string // http://user:pass@127.0.0.1:port/
	User     string // the admin's name
	Pass     string // the admin's password
	Data     string // the data directory

	opts    Options
	ownData bool // Data was made by StartProcess and is removed by Cleanup

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
	log  *logBuffer
}

// logBuffer collects a process's output, copying it to extra when set; it
// is safe for concurrent use.
type logBuffer struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	extra io.Writer
}

// Write appends p and copies it to extra.
func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.extra != nil {
		b.extra.Write(p)
	}
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// FreeAddr returns a 127.0.0.1 address with a port nothing listens on.
func FreeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// Start runs minicouch for t: it fails t if the server does not come up,
// and at t's end stops it (SIGTERM, then SIGKILL), fails t if the server
// or a plugin reported a data race, and logs the server's output when t
// failed or $COUCHEPI_E2E_LOG is set.
func Start(t testing.TB, o Options) *Server {
	t.Helper()
	if o.Bin == "" {
		o.Bin = Minicouch(t)
	}
	if o.Data == "" {
		o.Data = t.TempDir()
	}
	s, err := newServer(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Stop()
		out := s.Log()
		if strings.Contains(out, "WARNING: DATA RACE") {
			t.Errorf("minicouch or a plugin reported a data race")
		}
		if t.Failed() || os.Getenv("COUCHEPI_E2E_LOG") != "" {
			t.Logf("minicouch log:\n%s", out)
		}
	})
	if err := s.start(); err != nil {
		t.Fatal(err)
	}
	return s
}

var (
	processesMu sync.Mutex
	processes   []*Server
)

// StartProcess runs minicouch outside any one test (a server shared by a
// package's tests). The caller stops it with Stop; Main stops what is left.
func StartProcess(o Options) (*Server, error) {
	if o.Bin == "" {
		bin, err := Binary(Build{Pkg: MinicouchPkg})
		if err != nil {
			return nil, err
		}
		o.Bin = bin
	}
	own := false
	if o.Data == "" {
		dir, err := os.MkdirTemp("", "minicouch-data-")
		if err != nil {
			return nil, err
		}
		o.Data, own = dir, true
	}
	s, err := newServer(o)
	if err == nil {
		s.ownData = own
		err = s.start()
		if err != nil {
			s.Stop()
		}
	}
	if err != nil {
		if own {
			os.RemoveAll(o.Data)
		}
		return nil, err
	}
	processesMu.Lock()
	processes = append(processes, s)
	processesMu.Unlock()
	return s, nil
}

// Main runs the tests, then Cleanup; it returns m.Run's exit code.
func Main(m *testing.M) int {
	code := m.Run()
	Cleanup()
	return code
}

// Cleanup stops the servers StartProcess started and removes the built
// binaries. Main calls it; a TestMain that exits another way calls it
// itself.
func Cleanup() {
	processesMu.Lock()
	left := processes
	processes = nil
	processesMu.Unlock()
	for _, s := range left {
		s.Stop()
		if s.ownData {
			os.RemoveAll(s.Data)
		}
	}
	removeBinaries()
}

func newServer(o Options) (*Server, error) {
	if o.Admin == "" {
		o.Admin = "admin:pass"
	}
	if o.Addr == "" {
		a, err := FreeAddr()
		if err != nil {
			return nil, err
		}
		o.Addr = a
	}
	if o.StartTimeout == 0 {
		o.StartTimeout = 60 * time.Second
	}
	if o.StopTimeout == 0 {
		o.StopTimeout = 20 * time.Second
	}
	user, pass, _ := strings.Cut(o.Admin, ":")
	s := &Server{
		Addr: o.Addr, URL: "http://" + o.Addr + "/", AdminURL: "http://" + o.Admin + "@" + o.Addr + "/",
		User: user, Pass: pass, Data: o.Data, opts: o, log: &logBuffer{extra: o.Log},
	}
	if o.Config != "" {
		if err := os.WriteFile(s.configPath(), []byte(o.Config), 0o600); err != nil {
			return nil, err
		}
	}
	return s, nil
}

func (s *Server) configPath() string { return filepath.Join(s.Data, "test.ini") }

// args is minicouch's command line.
func (s *Server) args() []string {
	o := s.opts
	a := []string{"--addr", o.Addr, "--data", o.Data, "--admin", o.Admin}
	if o.Config != "" {
		a = append(a, "--config", s.configPath())
	}
	for _, p := range o.Plugins {
		a = append(a, "--plugin", p)
	}
	if o.Fauxton != "" {
		a = append(a, "--fauxton", o.Fauxton)
	}
	return append(a, o.Args...)
}

// start launches the process and waits for its listening line.
func (s *Server) start() error {
	cmd := exec.Command(s.opts.Bin, s.args()...)
	cmd.Dir = s.opts.Dir
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	cmd.Stderr = s.log
	childproc.DieWithParent(cmd)
	if err := cmd.Start(); err != nil {
		return err
	}
	ready := make(chan struct{})
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64*1024), 1<<20)
		seen := false
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(s.log, line)
			if !seen && strings.HasPrefix(line, readyLine) {
				seen = true
				close(ready)
			}
		}
		io.Copy(s.log, stdout)
	}()
	done := make(chan struct{})
	go func() {
		<-scanned // Wait closes stdout: read it all first
		cmd.Wait()
		close(done)
	}()
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()
	select {
	case <-ready:
		return nil
	case <-done:
		s.forget(cmd)
		return fmt.Errorf("minicouch exited at start-up (%v):\n%s", cmd.ProcessState, s.Log())
	case <-time.After(s.opts.StartTimeout):
		s.Kill()
		return fmt.Errorf("minicouch did not print %q within %v:\n%s", strings.TrimSpace(readyLine), s.opts.StartTimeout, s.Log())
	}
}

// running returns the current process and its exit channel (nil when stopped).
func (s *Server) running() (*exec.Cmd, chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cmd, s.done
}

// Stop sends SIGTERM and waits for the exit, sending SIGKILL after
// Options.StopTimeout. It returns the exit error (nil for exit status 0).
// Stopping a stopped server does nothing.
func (s *Server) Stop() error {
	cmd, done := s.running()
	if cmd == nil {
		return nil
	}
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(s.opts.StopTimeout):
		cmd.Process.Kill()
		<-done
	}
	s.forget(cmd)
	return exitErr(cmd)
}

// Kill sends SIGKILL (kill -9) and waits until the process is gone.
func (s *Server) Kill() error {
	cmd, done := s.running()
	if cmd == nil {
		return errors.New("minicouch is not running")
	}
	err := cmd.Process.Kill()
	<-done
	s.forget(cmd)
	return err
}

func (s *Server) forget(cmd *exec.Cmd) {
	s.mu.Lock()
	if s.cmd == cmd {
		s.cmd, s.done = nil, nil
	}
	s.mu.Unlock()
}

func exitErr(cmd *exec.Cmd) error {
	if st := cmd.ProcessState; st != nil && !st.Success() {
		return fmt.Errorf("minicouch: %v", st)
	}
	return nil
}

// Restart starts the server again on the same address and data directory
// with the same options, after Stop, Kill or an exit of its own; it fails t
// if the server does not come up.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	if cmd, _ := s.running(); cmd != nil {
		t.Fatal("minicouch is still running")
	}
	if err := s.start(); err != nil {
		t.Fatal(err)
	}
}

// Signal sends sig to the minicouch process.
func (s *Server) Signal(sig os.Signal) error {
	cmd, _ := s.running()
	if cmd == nil {
		return errors.New("minicouch is not running")
	}
	return cmd.Process.Signal(sig)
}

// Wait waits up to timeout for the process to exit on its own (after a
// Signal) and returns its state; ok is false on timeout.
func (s *Server) Wait(timeout time.Duration) (st *os.ProcessState, ok bool) {
	cmd, done := s.running()
	if cmd == nil {
		return nil, false
	}
	select {
	case <-done:
		s.forget(cmd)
		return cmd.ProcessState, true
	case <-time.After(timeout):
		return nil, false
	}
}

// PID is the minicouch process id (0 when it is not running).
func (s *Server) PID() int {
	cmd, _ := s.running()
	if cmd == nil {
		return 0
	}
	return cmd.Process.Pid
}

// Log returns everything the server (and its plugins, through it) printed.
func (s *Server) Log() string { return s.log.String() }
