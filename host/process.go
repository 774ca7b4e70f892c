package host

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/couchepi/couchepi/hooks"
	pb "github.com/couchepi/couchepi/internal/hookspb"
	"github.com/couchepi/couchepi/internal/wire"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
)

// pluginDialOptions are the host's options for the connection to a plugin
// process, on top of go-plugin's (TLS, dialer): message limits and fixed
// windows.
func pluginDialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(wire.MaxMsgSize), grpc.MaxCallSendMsgSize(wire.MaxMsgSize)),
		grpc.WithInitialWindowSize(wire.WindowSize), grpc.WithInitialConnWindowSize(wire.ConnWindowSize),
	}
}

// instance is one plugin process.
type instance struct {
	m      *managed
	client *plugin.Client
	rpc    pb.PluginClient
	broker *plugin.GRPCBroker
	path   string // the binary as the user named it
	exe    string // the private copy executed (see privateCopy)
	sum    string
	pid    int
	info   hooks.PluginInfo

	exited     chan struct{} // closed once the process is gone
	retired    chan struct{} // closed when the host took it out of service on purpose
	retireOnce sync.Once
	suspect    chan struct{} // a caller saw a transport error: check health now
	killOnce   sync.Once
	started    atomic.Bool // Start succeeded: events may be delivered

	// Sync hooks travel on reused DocHooks streams, all ended by
	// stopStreams when the instance is retired; unaryHooks is set for a
	// plugin that does not implement DocHooks.
	hookStreams chan *hookStream
	streamCtx   context.Context
	stopStreams context.CancelFunc
	unaryHooks  atomic.Bool
}

func (i *instance) isStarted() bool { return i.started.Load() }

// retire marks the instance as deliberately stopped, so its exit is not a crash.
func (i *instance) retire() {
	i.retireOnce.Do(func() {
		close(i.retired)
		i.stopStreams()
	})
}

// kill ends the process: graceful close, then SIGKILL after 2s. It
// returns once the process has exited and spawn's goroutine has removed
// its pid file.
func (i *instance) kill() {
	i.killOnce.Do(func() {
		i.retire()
		i.client.Kill()
	})
	<-i.exited
}

// reportTransportError asks the monitor to check the instance now.
func (i *instance) reportTransportError() {
	select {
	case i.suspect <- struct{}{}:
	default:
	}
}

// privateCopy copies the binary at path, through one open file, into a new
// directory only this user can enter, hashing the bytes as they are
// copied. The host executes the copy, so the bytes it runs are the bytes
// it hashed, whatever happens to path meanwhile (checking path and then
// executing it would let a file renamed over path in between run
// unverified). remove deletes the copy and its directory; a running
// process keeps its image.
func privateCopy(path, stateDir string) (exe, sum string, remove func(), err error) {
	src, err := os.Open(path)
	if err != nil {
		return "", "", nil, err
	}
	defer src.Close()
	if fi, err := src.Stat(); err != nil {
		return "", "", nil, err
	} else if !fi.Mode().IsRegular() {
		return "", "", nil, fmt.Errorf("not a regular file")
	}
	if stateDir != "" {
		if err := os.MkdirAll(stateDir, 0o700); err != nil {
			return "", "", nil, fmt.Errorf("private copy: %w", err)
		}
	}
	dir, err := os.MkdirTemp(stateDir, ".couchepi-exec-")
	if err != nil {
		return "", "", nil, fmt.Errorf("private copy: %w", err)
	}
	remove = func() { os.RemoveAll(dir) }
	exe = filepath.Join(dir, filepath.Base(path))
	// No fork while the copy is open for writing: a child forked now would
	// hold the descriptor until it execs, and executing the copy meanwhile
	// fails with "text file busy".
	syscall.ForkLock.Lock()
	dst, err := os.OpenFile(exe, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o700)
	if err != nil {
		syscall.ForkLock.Unlock()
		remove()
		return "", "", nil, fmt.Errorf("private copy: %w", err)
	}
	hash := sha256.New()
	_, err = io.Copy(io.MultiWriter(dst, hash), src)
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	syscall.ForkLock.Unlock()
	if err != nil {
		remove()
		return "", "", nil, fmt.Errorf("private copy: %w", err)
	}
	return exe, hex.EncodeToString(hash.Sum(nil)), remove, nil
}

// checksum returns the hex SHA-256 of the file at path.
func checksum(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	hash := sha256.New()
	if _, err := io.Copy(hash, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(hash.Sum(nil)), nil
}

// launch starts a process for spec and makes it ready to answer sync hooks:
// checksum check, handshake (AutoMTLS), Configure, GetInfo. It is not
// Started: no events and no host services yet.
func (h *Host) launch(ctx context.Context, m *managed, spec Spec) (*instance, error) {
	path, err := filepath.Abs(spec.Path)
	if err != nil {
		return nil, fmt.Errorf("plugin %s: %w", spec.Path, err)
	}
	exe, sum, removeCopy, err := privateCopy(path, h.cfg.StateDir)
	if err != nil {
		return nil, fmt.Errorf("plugin %s: %w", path, err)
	}
	defer removeCopy()
	var secure *plugin.SecureConfig
	if spec.SHA256 != "" {
		want := strings.ToLower(strings.TrimSpace(spec.SHA256))
		raw, err := hex.DecodeString(want)
		if err != nil || len(raw) != sha256.Size {
			return nil, fmt.Errorf("plugin %s: pinned SHA256 %q is not 64 hex digits; not started", path, spec.SHA256)
		}
		if want != sum {
			return nil, fmt.Errorf("plugin %s: checksum mismatch: expected sha256 %s, binary has sha256 %s; not started", path, want, sum)
		}
		// go-plugin checks the private copy once more before running it.
		secure = &plugin.SecureConfig{Checksum: raw, Hash: sha256.New()}
	}
	log := m.log
	cmd := exec.Command(exe)
	if h.cfg.StateDir != "" {
		// Plugins keep their durable files (the replicator's job store) here,
		// named after themselves, so a reloaded binary finds its predecessor's.
		cmd.Env = []string{StateDirEnv + "=" + h.cfg.StateDir}
	}
	setParentDeathSignal(cmd)
	client := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  wire.Handshake,
		VersionedPlugins: map[int]plugin.PluginSet{wire.Protocol: {wire.PluginKey: &grpcClientPlugin{}}},
		Cmd:              cmd,
		SecureConfig:     secure,
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		AutoMTLS:         true,
		Logger:           log,
		SyncStdout:       log.StandardWriter(&hclog.StandardLoggerOptions{ForceLevel: hclog.Info}),
		SyncStderr:       log.StandardWriter(&hclog.StandardLoggerOptions{InferLevels: true}),
		StartTimeout:     time.Minute,
		GRPCDialOptions:  pluginDialOptions(),
	})
	inst := &instance{m: m, client: client, path: path, exe: exe, sum: sum,
		exited: make(chan struct{}), retired: make(chan struct{}), suspect: make(chan struct{}, 1),
		hookStreams: make(chan *hookStream, idleHookStreams)}
	inst.streamCtx, inst.stopStreams = context.WithCancel(context.Background())
	if err := h.spawn(inst); err != nil {
		return nil, fmt.Errorf("plugin %s: %w", path, err)
	}
	proto, err := client.Client()
	if err == nil {
		var raw interface{}
		raw, err = proto.Dispense(wire.PluginKey)
		if err == nil {
			conn := raw.(*pluginConn)
			inst.rpc, inst.broker = conn.rpc, conn.broker
		}
	}
	if err == nil {
		inst.info, err = h.configure(ctx, inst, h.currentConfig())
	}
	if err != nil {
		inst.kill()
		return nil, fmt.Errorf("plugin %s: %w", path, err)
	}
	return inst, nil
}

// configure sends the config and reads the plugin's info (which may depend
// on the config).
func (h *Host) configure(ctx context.Context, inst *instance, cfg hooks.Config) (hooks.PluginInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if cfg == nil {
		cfg = hooks.Config{}
	}
	if _, err := inst.rpc.Configure(ctx, wire.ConfigToPB(cfg)); err != nil {
		return hooks.PluginInfo{}, fmt.Errorf("configure: %w", wire.Err(err))
	}
	reply, err := inst.rpc.GetInfo(ctx, &pb.Empty{})
	if err != nil {
		return hooks.PluginInfo{}, fmt.Errorf("get info: %w", wire.Err(err))
	}
	info := wire.InfoFromPB(reply)
	if info.Name == "" {
		return info, fmt.Errorf("plugin declares no name")
	}
	for _, s := range info.Subscriptions {
		if !s.Hook.Valid() {
			return info, fmt.Errorf("plugin %s subscribes to unknown hook %q", info.Name, s.Hook)
		}
	}
	return info, nil
}

// startInstance serves HostServices on a broker stream and calls Start;
// after it, the instance receives after_* events.
func (h *Host) startInstance(ctx context.Context, inst *instance) error {
	id := inst.broker.NextId()
	go inst.broker.AcceptAndServe(id, func(opts []grpc.ServerOption) *grpc.Server {
		opts = append(opts, grpc.MaxRecvMsgSize(wire.MaxMsgSize), grpc.MaxSendMsgSize(wire.MaxMsgSize))
		s := grpc.NewServer(opts...)
		pb.RegisterHostServicesServer(s, &servicesServer{svc: h.cfg.Services})
		return s
	})
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if _, err := inst.rpc.Start(ctx, &pb.StartRequest{HostServicesBrokerId: id}); err != nil {
		return fmt.Errorf("plugin %s: start: %w", inst.info.Name, wire.Err(err))
	}
	inst.started.Store(true)
	return nil
}

// spawn starts the process from a goroutine locked to its own OS thread.
// Linux delivers the parent-death signal when the *thread* that forked the
// child exits, so that thread must outlive the child: the goroutine stays
// locked and alive until the process has exited, then returns (which ends
// the thread). It also keeps the pid file for the process's lifetime.
func (h *Host) spawn(inst *instance) error {
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// Never unlocked: returning ends the thread, after the child is gone.
		if _, err := inst.client.Start(); err != nil {
			started <- err
			close(inst.exited)
			return
		}
		inst.pid = inst.client.ReattachConfig().Pid
		// The pid file names the executed copy: killStale matches it
		// against /proc/<pid>/exe.
		pidFile := writePidFile(h.cfg.StateDir, inst.pid, inst.exe, h.log)
		started <- nil
		for !inst.client.Exited() {
			time.Sleep(50 * time.Millisecond)
		}
		removePidFile(pidFile)
		close(inst.exited)
	}()
	return <-started
}

// grpcClientPlugin is the host side of the go-plugin glue.
type grpcClientPlugin struct {
	plugin.NetRPCUnsupportedPlugin
}

// pluginConn is what Dispense returns: the Plugin client and the broker.
type pluginConn struct {
	rpc    pb.PluginClient
	broker *plugin.GRPCBroker
}

// GRPCServer is not used on the host side.
func (grpcClientPlugin) GRPCServer(*plugin.GRPCBroker, *grpc.Server) error {
	return fmt.Errorf("couchepi: the plugin server side lives in the sdk package")
}

// GRPCClient wraps the connection to a plugin process.
func (grpcClientPlugin) GRPCClient(_ context.Context, broker *plugin.GRPCBroker, c *grpc.ClientConn) (interface{}, error) {
	return &pluginConn{rpc: pb.NewPluginClient(c), broker: broker}, nil
}
