package agentproc

import (
	"cmp"
	"context"
	"log/slog"

	"github.com/pcapsync/pcapsync/internal/agent"
	"github.com/pcapsync/pcapsync/internal/fielderr"
	"github.com/pcapsync/pcapsync/internal/metrics"
	"github.com/pcapsync/pcapsync/internal/pki"
	"github.com/pcapsync/pcapsync/internal/privilege"
)

// Config configures an agent process. Its zero value but Agent's
// required fields runs an agent without metrics, as the user it was
// started as.
type Config struct {
	// Agent is the agent's configuration. Its AckLatency is set by New
	// when Metrics.Addr is set; its Logger defaults to Logger.
	Agent agent.Config
	// Metrics serves the agent's Prometheus metrics at /metrics (and Go's
	// profiler with Metrics.Pprof) when Metrics.Addr is set.
	Metrics metrics.Config
	// CertFiles are (role, file) pairs of certificate files
	// (pki.RoleCert, pki.RoleCA) whose expiry the metrics export; a
	// file "" is skipped. Only with Metrics.Addr.
	CertFiles [][2]string
	// User, if set, is the user (name or uid) the process switches to,
	// giving up every capability, once the capture, the spool and the
	// metrics listener are open and before the agent connects. Started
	// as root, the process first hands the spool (Agent.Spool) to the
	// user, so that it can go on writing it.
	User string
	// Logger receives events. nil means Agent.Logger, else
	// slog.Default().
	Logger *slog.Logger
}

// Validate reports a Config New would refuse for its settings alone
// (agent.Config.Validate, then metrics.Config.Validate); its errors
// match ErrConfig.
func (c *Config) Validate() error {
	if err := c.Agent.Validate(); err != nil {
		return configError{err}
	}
	if err := c.Metrics.Validate(); err != nil {
		return configError{err}
	}
	return nil
}

// configError is an error of Validate: its text is the part's (what
// ErrConfig would add says nothing), and it matches ErrConfig.
type configError struct{ err error }

func (e configError) Error() string { return e.err.Error() }

func (e configError) Unwrap() error { return e.err }

func (configError) Is(target error) bool { return target == ErrConfig }

// Process is an agent with its metrics listener, built by New.
type Process struct {
	a     *agent.Agent
	m     *metrics.Agent  // nil without metrics
	srv   *metrics.Server // nil without metrics
	pprof bool
	log   *slog.Logger
}

// New validates cfg, opens the metrics listener, builds the agent and,
// with cfg.User, hands it the spool and switches to it. After an error
// the process must exit, not retry: the user may be half switched, and
// what the agent opened stays open until the process exits.
func New(cfg Config) (*Process, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := cmp.Or(cfg.Logger, cfg.Agent.Logger, slog.Default())
	if cfg.Agent.Logger == nil {
		cfg.Agent.Logger = log
	}
	p := &Process{pprof: cfg.Metrics.Pprof, log: log}
	if err := p.openMetrics(&cfg); err != nil {
		return nil, err
	}
	err := p.build(cfg)
	if err != nil && p.srv != nil {
		p.srv.Close()
	}
	return p, err
}

// openMetrics opens the metrics listener and the agent's registry, when
// cfg asks for metrics.
func (p *Process) openMetrics(cfg *Config) error {
	if cfg.Metrics.Addr == "" {
		return nil
	}
	srv, err := metrics.Listen(cfg.Metrics)
	if err != nil {
		return err
	}
	p.srv, p.m = srv, metrics.NewAgent()
	cfg.Agent.AckLatency = p.m.AckLatency
	certs, err := pki.CertificateFiles(cfg.CertFiles...)
	if err != nil {
		srv.Close()
		return err
	}
	metrics.WatchCertificates(p.m.Registry, certs)
	return nil
}

// build makes the agent and switches to cfg.User.
func (p *Process) build(cfg Config) error {
	uid, gid, handOver, err := privilege.Owner(cfg.User)
	if err != nil {
		return fielderr.Errorf("{agentproc.User} %s: %w", cfg.User, err)
	}
	if p.a, err = agent.New(cfg.Agent); err != nil {
		return err
	}
	if handOver && cfg.Agent.Spool != "" {
		if err := agent.ChownSpool(cfg.Agent.Spool, uid, gid); err != nil {
			return fielderr.Errorf("{agentproc.User} %s: %w", cfg.User, err)
		}
	}
	if err := privilege.Switch(p.log, cfg.User); err != nil {
		return fielderr.Errorf("{agentproc.User} %s: %w", cfg.User, err)
	}
	return nil
}

// Run serves the metrics and runs the agent until ctx ends (the agent
// then sends what it holds and waits for acknowledgements up to its
// ShutdownTimeout) or, replaying a file, until every packet is
// acknowledged. It returns the agent's summary, also after an error.
func (p *Process) Run(ctx context.Context) (agent.Summary, error) {
	stop := func() {}
	if p.srv != nil {
		p.m.Watch(p.a)
		sctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			p.srv.Run(sctx, metrics.Handler(p.m.Registry, metrics.Options{Pprof: p.pprof}), p.log)
		}()
		stop = func() { cancel(); <-done }
	}
	sum, err := p.a.Run(ctx)
	stop()
	return sum, err
}

// MetricsAddr is the address the metrics listener is bound to; ""
// without one.
func (p *Process) MetricsAddr() string {
	if p.srv == nil {
		return ""
	}
	return p.srv.Addr()
}
