package sdk

import (
	"context"
	"os"
	"sync"

	pb "github.com/couchepi/couchepi/internal/hookspb"
	"github.com/couchepi/couchepi/internal/wire"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
)

// newGRPCServer builds the plugin's gRPC server from go-plugin's options
// (TLS): message limits and fixed windows.
func newGRPCServer(opts []grpc.ServerOption) *grpc.Server {
	opts = append(opts,
		grpc.MaxRecvMsgSize(wire.MaxMsgSize), grpc.MaxSendMsgSize(wire.MaxMsgSize),
		grpc.InitialWindowSize(wire.WindowSize), grpc.InitialConnWindowSize(wire.ConnWindowSize))
	return grpc.NewServer(opts...)
}

// Logger returns the plugin's logger: JSON lines on stderr, which the host
// re-logs through its own hclog.Logger under the plugin's name, at the
// level COUCHEPI_PLUGIN_LOG_LEVEL names (info when unset), read at the
// first call of Logger or Serve.
func Logger() hclog.Logger { return stderrLogger() }

// stderrLogger makes Logger's logger once, at its first use rather than
// at package init: the process has one stderr, so every user shares it.
var stderrLogger = sync.OnceValue(func() hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{
		Name:       "plugin",
		Output:     os.Stderr,
		JSONFormat: true,
		Level:      hclog.LevelFromString(envOr("COUCHEPI_PLUGIN_LOG_LEVEL", "info")),
	})
})

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// Serve runs p as a couchepi plugin with the default ServeConfig: it answers
// the host's handshake and serves hooks until the host closes the plugin.
// Call it from main; it blocks. Run by hand (outside a host) it prints a
// notice and exits.
func Serve(p Plugin) { (&ServeConfig{}).Serve(p) }

// ServeConfig configures how a plugin is served. Its zero value is what
// Serve uses.
type ServeConfig struct {
	// Logger receives go-plugin's own logs and the SDK's (a panic in a
	// hook, a failed event handler). nil means Logger(): JSON lines on
	// stderr, which the host re-logs under the plugin's name. A plugin
	// that logs elsewhere passes the same logger to its own code.
	Logger hclog.Logger
}

// Serve runs p as a couchepi plugin configured by c; see the package Serve.
func (c *ServeConfig) Serve(p Plugin) {
	log := c.Logger
	if log == nil {
		log = Logger()
	}
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig: wire.Handshake,
		VersionedPlugins: map[int]plugin.PluginSet{
			wire.Protocol: {wire.PluginKey: &grpcPlugin{impl: p, log: log}},
		},
		GRPCServer: newGRPCServer,
		Logger:     log.Named("go-plugin"),
	})
}

// grpcPlugin is the go-plugin glue: it registers the Plugin service.
type grpcPlugin struct {
	plugin.NetRPCUnsupportedPlugin
	impl Plugin
	log  hclog.Logger // the server's own warnings (ServeConfig.Logger)
}

// GRPCServer registers p's Plugin service on the plugin's gRPC server.
func (g *grpcPlugin) GRPCServer(broker *plugin.GRPCBroker, s *grpc.Server) error {
	pb.RegisterPluginServer(s, newServer(g.impl, broker, g.log))
	return nil
}

// GRPCClient is not used in a plugin process.
func (g *grpcPlugin) GRPCClient(context.Context, *plugin.GRPCBroker, *grpc.ClientConn) (interface{}, error) {
	return nil, errHostOnly
}
