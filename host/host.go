package host

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/couchepi/couchepi/hooks"
	"github.com/hashicorp/go-hclog"
)

// Spec names a plugin binary. SHA256 (hex) is optional; when set, the binary
// must match it or the plugin is not started.
type Spec struct {
	Path   string
	SHA256 string
}

// Config configures a Host.
type Config struct {
	// Services is what the server does for plugins (list dbs, changes, docs).
	Services hooks.Services
	// Logger receives the host's and the plugins' logs; nil = stderr.
	Logger hclog.Logger
	// Config is the initial server config handed to plugins.
	Config hooks.Config
	// HookTimeout bounds one synchronous hook call; default 5s.
	HookTimeout time.Duration
	// QueueSize bounds each plugin's queue of after_* events; default 10000.
	QueueSize int
	// StateDir holds pid files of running plugins, so processes left behind
	// by a killed server are cleaned up at the next start; "" = none. Plugins
	// find it in their environment as StateDirEnv and keep their own durable
	// files there.
	StateDir string
}

// StateDirEnv names the environment variable through which a plugin process
// learns Config.StateDir.
const StateDirEnv = "COUCHEPI_STATE_DIR"

// PluginStatus describes one loaded plugin.
type PluginStatus struct {
	Name    string
	Version string
	Path    string
	SHA256  string
	PID     int
	State   State
}

// State is the life-cycle state of a loaded plugin, as Plugins reports it.
type State string

// Plugin states reported by Plugins.
const (
	StateStarting   State = "starting"
	StateRunning    State = "running"
	StateReloading  State = "reloading"
	StateRestarting State = "restarting"
	StateFailed     State = "failed"
	StateStopped    State = "stopped"
)

// Host runs plugins for a server and dispatches hooks to them. Create it
// with New, Load plugins, and call its hook methods from the server's
// write and read paths. All methods are safe for concurrent use.
type Host struct {
	cfg Config
	log hclog.Logger

	mu      sync.Mutex
	plugins []*managed // load order
	config  hooks.Config
	closed  bool

	table atomic.Pointer[dispatchTable]

	mx *metrics
}

// New returns a Host. When cfg.StateDir holds pid files of plugin processes
// left by a previous run that was killed, those processes are killed now.
func New(cfg Config) *Host {
	if cfg.HookTimeout <= 0 {
		cfg.HookTimeout = 5 * time.Second
	}
	if cfg.QueueSize <= 0 {
		cfg.QueueSize = 10000
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.New(&hclog.LoggerOptions{Name: "couchepi"})
	}
	h := &Host{cfg: cfg, log: cfg.Logger.Named("host"), config: cfg.Config}
	h.table.Store(&dispatchTable{})
	h.mx = newMetrics(h)
	if cfg.StateDir != "" {
		killStale(cfg.StateDir, h.log)
	}
	return h
}

// ErrAlreadyLoaded is Load's error for a plugin whose name is loaded
// already (Reload swaps a loaded plugin).
var ErrAlreadyLoaded = errors.New("is already loaded")

// Load starts the plugin binary: handshake, Configure, GetInfo, Start. When
// it returns nil the plugin's hooks and routes are live.
func (h *Host) Load(ctx context.Context, spec Spec) error {
	h.mu.Lock()
	closed := h.closed
	h.mu.Unlock()
	if closed {
		return errors.New("couchepi host is closed")
	}
	m := newManaged(h, spec)
	inst, err := h.launch(ctx, m, spec)
	if err != nil {
		return err
	}
	h.mu.Lock()
	if h.closed {
		// Close ran while the process started: it did not see this
		// plugin, so it must not outlive the host.
		h.mu.Unlock()
		inst.kill()
		<-inst.exited
		return errors.New("couchepi host is closed")
	}
	for _, o := range h.plugins {
		if o.name == inst.info.Name {
			h.mu.Unlock()
			inst.kill()
			return fmt.Errorf("plugin %s (%s) %w from %s", inst.info.Name, spec.Path, ErrAlreadyLoaded, o.status().Path)
		}
	}
	m.name = inst.info.Name
	m.log = h.log.Named(m.name)
	m.info = inst.info
	m.mx = h.mx.forPlugin(m.name)
	h.plugins = append(h.plugins, m)
	h.mu.Unlock()
	m.setCur(inst)
	h.rebuild()
	if err := h.startInstance(ctx, inst); err != nil {
		m.setCur(nil)
		h.mu.Lock()
		h.plugins = h.plugins[:len(h.plugins)-1]
		h.mu.Unlock()
		h.rebuild()
		inst.kill()
		return err
	}
	m.setState(StateRunning)
	m.lifeMu.Lock()
	// Close may have closed m meanwhile: it has stopped inst then, and
	// goLocked starts nothing.
	m.goLocked(func() { m.monitor(inst) })
	m.goLocked(m.deliverLoop)
	m.lifeMu.Unlock()
	m.log.Info("plugin loaded", "version", inst.info.Version, "path", inst.path, "pid", inst.pid)
	return nil
}

// Reload swaps the named plugin to a new binary (zero Spec = the same one)
// while the server keeps running: the new process starts and is configured
// (it answers sync hooks and routes from then on), the old one is told to
// Stop (drain) and exits, then the new one is Started and receives the
// after_* events the old one had not acknowledged. If the new binary cannot
// start, the old one keeps running and the error is returned.
func (h *Host) Reload(ctx context.Context, name string, spec Spec) error {
	m := h.find(name)
	if m == nil {
		return fmt.Errorf("no plugin named %s is loaded", name)
	}
	return m.reload(ctx, spec)
}

// Plugins reports the loaded plugins in load order.
func (h *Host) Plugins() []PluginStatus {
	h.mu.Lock()
	ms := append([]*managed(nil), h.plugins...)
	h.mu.Unlock()
	out := make([]PluginStatus, len(ms))
	for i, m := range ms {
		out[i] = m.status()
	}
	return out
}

// SetConfig hands a changed server config to every plugin (Configure) and
// refreshes their subscriptions and routes.
func (h *Host) SetConfig(ctx context.Context, cfg hooks.Config) {
	h.mu.Lock()
	h.config = cfg
	ms := append([]*managed(nil), h.plugins...)
	h.mu.Unlock()
	for _, m := range ms {
		inst := m.cur.Load()
		if inst == nil {
			continue // configured when it restarts
		}
		info, err := h.configure(ctx, inst, cfg)
		if err != nil {
			m.log.Error("configure failed", "error", err)
			continue
		}
		m.mu.Lock()
		m.info = info
		m.mu.Unlock()
	}
	h.rebuild()
}

func (h *Host) currentConfig() hooks.Config {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.config
}

func (h *Host) find(name string) *managed {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, m := range h.plugins {
		if m.name == name {
			return m
		}
	}
	return nil
}

// Close stops every plugin cleanly (Stop, then the process exits) in
// reverse load order. Hooks called after Close answer 503.
func (h *Host) Close() error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil
	}
	h.closed = true
	ms := append([]*managed(nil), h.plugins...)
	h.mu.Unlock()
	var errs []error
	for i := len(ms) - 1; i >= 0; i-- {
		if err := ms[i].close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
