// Package kafkatest runs a throwaway Apache Kafka broker for tests and
// benchmarks: one JVM in KRaft combined mode (broker and controller),
// from the jars scripts/kafka.sh fetches from Maven Central, on free
// loopback ports, with its log in a temporary directory. It never
// touches a system Kafka.
//
// Two layers: Launch starts a Process and reports every problem as an
// error (Close stops it and removes its files), for a program such as
// the lab's benchmarks; Start and StartWith wrap it for a test (a
// Broker), skipping or failing the test instead and stopping the broker
// at its end.
package kafkatest

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pcapsync/pcapsync/internal/testutil/freeport"
)

// RequireEnv, set to 1, turns a missing Java runtime or missing broker
// jars into a failure instead of a skip (the project's test script sets
// it).
const RequireEnv = "PCAPSYNC_E2E_REQUIRE"

// LibsEnv names the directory of the broker's jars; by default
// scripts/kafka.sh's cache.
const LibsEnv = "PCAPSYNC_KAFKA_LIBS"

// Version is the Kafka release scripts/kafka.sh fetches by default.
const Version = "4.1.1"

// startTimeout bounds a start: about 3 s here, a JVM on a loaded
// machine can take much longer.
const startTimeout = 60 * time.Second

// TB is what Start needs of a test or benchmark: testing.TB has it all.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
	Skipf(format string, args ...any)
	Logf(format string, args ...any)
	TempDir() string
	Cleanup(func())
	Failed() bool
}

// Process is one Kafka JVM that Launch started. Its methods are not
// safe for concurrent use.
type Process struct {
	Addr string // the PLAINTEXT listener, 127.0.0.1:port: the bootstrap address
	// TLSAddr is the SSL listener (Options.CertFile), SASLAddr the
	// SASL_SSL or SASL_PLAINTEXT one (Options.SCRAM); "" when not
	// configured. Each is a bootstrap address of its own: the broker
	// advertises, on a listener, that listener's address.
	TLSAddr, SASLAddr string

	opts       Options
	libs, dir  string
	controller string
	release    []func() // the ports' reservations
	cmd        *exec.Cmd
	done       chan struct{}
}

// Broker is a Process for a test: its methods fail the test where the
// Process's return an error, and the test's cleanup stops it.
type Broker struct {
	*Process
	tb TB
}

// Options add secured listeners to a broker, besides the PLAINTEXT one
// that Start always has (Addr: the test's own administration, and the
// traffic between broker and controller).
type Options struct {
	// CertFile and KeyFile, PEM (a certificate chain and an unencrypted
	// PKCS#8 key, as internal/pki writes them), give the broker an SSL
	// listener at TLSAddr, and put SASL (if any) over TLS.
	CertFile, KeyFile string
	// ClientCAFile, PEM, makes the SSL listener require a client
	// certificate signed by one of its CAs (ssl.client.auth=required).
	ClientCAFile string
	// SCRAM users are created when the storage is formatted (the
	// StorageTool's --add-scram); any user gives the broker a SASL
	// listener at SASLAddr with SCRAM-SHA-256 and SCRAM-SHA-512,
	// SASL_SSL when CertFile is set, else SASL_PLAINTEXT.
	SCRAM []SCRAMUser
	// SuperUsers, when set, turn authorization on (the StandardAuthorizer
	// with no ACLs): only these principals ("User:alice", or "User:" and
	// a client certificate's subject) and the PLAINTEXT listener's
	// User:ANONYMOUS may do anything; every other request is refused.
	SuperUsers []string
	// Dir is where Launch makes the broker's directory (configuration,
	// log, data); "" is os.TempDir(). Close removes that directory.
	Dir string
}

// SCRAMUser is a SASL/SCRAM credential: Mechanism is "SCRAM-SHA-256" or
// "SCRAM-SHA-512". Name and Password must not hold ',', '[', ']' or '='
// (the StorageTool's syntax).
type SCRAMUser struct {
	Mechanism, Name, Password string
}

// Libs returns the directory of the broker's jars, or an error
// wrapping ErrMissing that says how to get them.
func Libs() (string, error) {
	dir := os.Getenv(LibsEnv)
	if dir == "" {
		cache, err := os.UserCacheDir()
		if err != nil {
			return "", fmt.Errorf("%w: %w", ErrMissing, err)
		}
		dir = filepath.Join(cache, "pcapsync", "kafka-"+Version, "libs")
	}
	if _, err := os.Stat(filepath.Join(dir, ".complete")); err != nil {
		return "", fmt.Errorf("%w: no Kafka broker jars in %s: run scripts/kafka.sh (Maven, Java 17)", ErrMissing, dir)
	}
	return dir, nil
}

// Launch formats a new log directory and starts a broker on it with the
// listeners o asks for, and waits until it answers metadata requests.
// Without java or the jars its error wraps ErrMissing. The caller owns
// the Process and must Close it.
func Launch(o Options) (p *Process, err error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	libs, err := Libs()
	if err != nil {
		return nil, err
	}
	if _, err := exec.LookPath("java"); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMissing, err)
	}
	dir, err := os.MkdirTemp(o.Dir, "kafkatest-")
	if err != nil {
		return nil, fmt.Errorf("kafkatest: %w", err)
	}
	p = &Process{opts: o, libs: libs, dir: dir}
	defer func() {
		if err != nil {
			p.Close()
			p = nil
		}
	}()
	addrs := []*string{&p.Addr, &p.controller}
	if o.CertFile != "" {
		addrs = append(addrs, &p.TLSAddr)
	}
	if len(o.SCRAM) > 0 {
		addrs = append(addrs, &p.SASLAddr)
	}
	for _, a := range addrs {
		port, release, err := freeport.Reserve()
		if err != nil {
			return nil, fmt.Errorf("kafkatest: %w", err)
		}
		p.release = append(p.release, release)
		*a = "127.0.0.1:" + strconv.Itoa(port)
	}
	if err := p.writeConfig(); err != nil {
		return nil, err
	}
	format := []string{"format", "-t", clusterID(), "-c", p.path("server.properties")}
	for _, u := range o.SCRAM {
		format = append(format, "--add-scram", fmt.Sprintf("%s=[name=%s,password=%s]", u.Mechanism, u.Name, u.Password))
	}
	if err := p.java(30*time.Second, "kafka.tools.StorageTool", format...); err != nil {
		return nil, err
	}
	return p, p.start()
}

// validate checks that o's listeners can be made.
func (o Options) validate() error {
	if (o.CertFile == "") != (o.KeyFile == "") {
		return fmt.Errorf("kafkatest: %w", ErrCertKey)
	}
	if o.ClientCAFile != "" && o.CertFile == "" {
		return fmt.Errorf("kafkatest: %w", ErrClientCANoTLS)
	}
	for _, u := range o.SCRAM {
		if strings.ContainsAny(u.Name+u.Password, ",[]=") {
			return fmt.Errorf("kafkatest: SCRAM user %q: %w", u.Name, ErrSCRAMSyntax)
		}
	}
	return nil
}

// Start is StartWith without secured listeners.
func Start(tb TB) *Broker {
	tb.Helper()
	return StartWith(tb, Options{})
}

// StartWith launches a broker (Launch) in tb's temporary directory and
// stops it at the end of tb, giving tb the broker's log if it failed.
// Without java or the jars it skips tb, or fails it when RequireEnv
// is 1; any other error fails tb.
func StartWith(tb TB, o Options) *Broker {
	tb.Helper()
	if o.Dir == "" {
		o.Dir = tb.TempDir()
	}
	p, err := Launch(o)
	switch {
	case errors.Is(err, ErrMissing) && os.Getenv(RequireEnv) == "1":
		tb.Fatalf("prerequisite missing (%s=1 makes this a failure): %v", RequireEnv, err)
	case errors.Is(err, ErrMissing):
		tb.Skipf("skipping: %v", err)
	case err != nil:
		tb.Fatalf("%v", err)
	}
	b := &Broker{Process: p, tb: tb}
	tb.Cleanup(b.cleanup)
	return b
}

// Client returns a franz-go client of the broker with opts, closed at the
// end of the test.
func (b *Broker) Client(opts ...kgo.Opt) *kgo.Client {
	b.tb.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(b.Addr)}, opts...)...)
	if err != nil {
		b.tb.Fatalf("kafka client: %v", err)
	}
	b.tb.Cleanup(cl.Close)
	return cl
}

// CreateTopic creates topic with partitions partitions (replication 1).
func (b *Broker) CreateTopic(topic string, partitions int32) {
	b.tb.Helper()
	adm := kadm.NewClient(b.Client())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := adm.CreateTopic(ctx, partitions, 1, nil, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		b.tb.Fatalf("creating topic %s: %v", topic, err)
	}
}

// PID returns the process id of the broker's JVM, 0 when it is not
// running (for a benchmark that reads its CPU time from /proc).
func (b *Process) PID() int {
	if b.cmd == nil || b.cmd.Process == nil {
		return 0
	}
	return b.cmd.Process.Pid
}

// Libs returns the directory of the jars the broker runs from (Kafka's
// tools are there too, when scripts/kafka.sh fetched them).
func (b *Process) Libs() string { return b.libs }

// Log returns what the broker has logged so far ("" when its log
// cannot be read).
func (b *Process) Log() string {
	log, _ := os.ReadFile(b.path("kafka.log"))
	return string(log)
}

func (b *Process) path(name string) string { return filepath.Join(b.dir, name) }

func (b *Process) writeConfig() error {
	listeners, advertised := "PLAINTEXT://"+b.Addr, "PLAINTEXT://"+b.Addr
	protocols := "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT"
	var secure []string
	o := b.opts
	// keystore: the broker's key and chain in one PEM file, which
	// Kafka reads with ssl.keystore.type=PEM (no password: the key is
	// not encrypted).
	tlsProps := func(listener string) []string {
		p := "listener.name." + listener + "."
		return []string{
			p + "ssl.keystore.type=PEM",
			p + "ssl.keystore.location=" + b.path("keystore.pem"),
		}
	}
	if b.TLSAddr != "" {
		var pem []byte
		for _, f := range []string{o.KeyFile, o.CertFile} {
			c, err := os.ReadFile(f)
			if err != nil {
				return fmt.Errorf("kafkatest: %w", err)
			}
			pem = append(append(pem, c...), '\n')
		}
		if err := os.WriteFile(b.path("keystore.pem"), pem, 0o600); err != nil {
			return fmt.Errorf("kafkatest: %w", err)
		}
		listeners += ",TLS://" + b.TLSAddr
		advertised += ",TLS://" + b.TLSAddr
		protocols += ",TLS:SSL"
		secure = append(secure, tlsProps("tls")...)
		if o.ClientCAFile != "" {
			secure = append(secure,
				"listener.name.tls.ssl.client.auth=required",
				"listener.name.tls.ssl.truststore.type=PEM",
				"listener.name.tls.ssl.truststore.location="+o.ClientCAFile)
		}
	}
	if b.SASLAddr != "" {
		listeners += ",SASL://" + b.SASLAddr
		advertised += ",SASL://" + b.SASLAddr
		if b.TLSAddr != "" {
			protocols += ",SASL:SASL_SSL"
			secure = append(secure, tlsProps("sasl")...)
		} else {
			protocols += ",SASL:SASL_PLAINTEXT"
		}
		secure = append(secure, "listener.name.sasl.sasl.enabled.mechanisms=SCRAM-SHA-256,SCRAM-SHA-512")
		for _, m := range []string{"scram-sha-256", "scram-sha-512"} {
			secure = append(secure, "listener.name.sasl."+m+".sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;")
		}
	}
	if len(o.SuperUsers) > 0 {
		secure = append(secure,
			"authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
			"super.users="+strings.Join(append([]string{"User:ANONYMOUS"}, o.SuperUsers...), ";"))
	}
	props := []string{
		"process.roles=broker,controller",
		"node.id=1",
		"controller.quorum.voters=1@" + b.controller,
		"listeners=" + listeners + ",CONTROLLER://" + b.controller,
		"advertised.listeners=" + advertised,
		"controller.listener.names=CONTROLLER",
		"listener.security.protocol.map=" + protocols,
		"inter.broker.listener.name=PLAINTEXT",
		"log.dirs=" + b.path("data"),
		"num.partitions=1",
		"offsets.topic.replication.factor=1",
		"offsets.topic.num.partitions=4",
		"transaction.state.log.replication.factor=1",
		"transaction.state.log.min.isr=1",
		"transaction.state.log.num.partitions=4",
		"share.coordinator.state.topic.replication.factor=1",
		"share.coordinator.state.topic.min.isr=1",
		"group.initial.rebalance.delay.ms=0",
		"auto.create.topics.enable=false",
	}
	props = append(props, secure...)
	if err := os.WriteFile(b.path("server.properties"), []byte(strings.Join(props, "\n")+"\n"), 0o600); err != nil {
		return fmt.Errorf("kafkatest: writing server.properties: %w", err)
	}
	return nil
}

// javaArgs are the JVM's: a small heap and the serial collector, for a
// broker that shares two cores with the tests.
func (b *Process) javaArgs(class string, args ...string) []string {
	return append([]string{"-Xms128m", "-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
		"-Djava.awt.headless=true", "-cp", filepath.Join(b.libs, "*"), class}, args...)
}

// java runs a Kafka tool to its end.
func (b *Process) java(timeout time.Duration, class string, args ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, "java", b.javaArgs(class, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("kafkatest: java %s %s: %w\n%s", class, strings.Join(args, " "), err, out)
	}
	return nil
}

// start starts the JVM and waits until it is ready; on an error it is
// stopped again.
func (b *Process) start() error {
	logf, err := os.OpenFile(b.path("kafka.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("kafkatest: %w", err)
	}
	b.cmd = exec.Command("java", b.javaArgs("kafka.Kafka", b.path("server.properties"))...)
	b.cmd.Stdout, b.cmd.Stderr = logf, logf
	if err := b.cmd.Start(); err != nil {
		logf.Close()
		b.cmd = nil
		return fmt.Errorf("kafkatest: starting kafka: %w", err)
	}
	b.done = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) { cmd.Wait(); logf.Close(); close(done) }(b.cmd, b.done)
	if err := b.waitReady(); err != nil {
		b.stop()
		return fmt.Errorf("kafkatest: kafka on %s: %w\n%s", b.Addr, err, b.Log())
	}
	return nil
}

// waitReady waits until the broker lists itself in a metadata answer.
func (b *Process) waitReady() error {
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr), kgo.RetryTimeout(time.Second))
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	for {
		select {
		case <-b.done:
			return fmt.Errorf("exited (%v) before it was ready", b.cmd.ProcessState)
		default:
		}
		tctx, tcancel := context.WithTimeout(ctx, 2*time.Second)
		brokers, err := adm.ListBrokers(tctx)
		tcancel()
		if err == nil && len(brokers) == 1 {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("not ready within %v: %v", startTimeout, err)
		}
		time.Sleep(100 * time.Millisecond) // a JVM starting: poll gently
	}
}

// Kill stops the broker at once (SIGKILL), as a crash would; Restart
// starts it again on the same ports and log directory.
func (b *Process) Kill() {
	if b.cmd == nil {
		return
	}
	b.cmd.Process.Kill()
	<-b.done
	b.cmd = nil
}

// Restart starts a killed broker again, with its data, and waits until
// it is ready.
func (b *Process) Restart() error {
	if b.cmd != nil {
		return nil
	}
	return b.start()
}

// stop ends the JVM: SIGTERM, then SIGKILL after 10 s.
func (b *Process) stop() {
	if b.cmd == nil {
		return
	}
	b.cmd.Process.Signal(os.Interrupt)
	select {
	case <-b.done:
	case <-time.After(10 * time.Second):
		b.cmd.Process.Kill()
		<-b.done
	}
	b.cmd = nil
}

// Close stops the broker (as Broker.Stop does), gives its ports back
// and removes its directory. It may be called more than once.
func (b *Process) Close() error {
	b.stop()
	for _, release := range b.release {
		release()
	}
	b.release = nil
	if b.dir == "" {
		return nil
	}
	err := os.RemoveAll(b.dir)
	b.dir = ""
	if err != nil {
		return fmt.Errorf("kafkatest: %w", err)
	}
	return nil
}

// Restart starts a killed broker again, with its data, failing the test
// if it does not come up.
func (b *Broker) Restart() {
	b.tb.Helper()
	if err := b.Process.Restart(); err != nil {
		b.tb.Fatalf("%v", err)
	}
}

// Stop ends the broker (SIGTERM, then SIGKILL after 10 s); Restart
// starts it again. A failed test gets the broker's log. The test's
// cleanup stops it too, and removes its files.
func (b *Broker) Stop() {
	if b.cmd == nil {
		return
	}
	b.stop()
	if b.tb.Failed() {
		b.tb.Logf("kafka log (%s):\n%s", b.Addr, b.Log())
	}
}

// cleanup is the test's: Stop, then Close.
func (b *Broker) cleanup() {
	b.Stop()
	if err := b.Close(); err != nil {
		b.tb.Logf("%v", err)
	}
}

// clusterID returns a new KRaft cluster id: 16 random bytes in URL-safe
// base64 without padding, not starting with "-" (as Kafka's own).
func clusterID() string {
	for {
		var u [16]byte
		rand.Read(u[:])
		if id := base64.RawURLEncoding.EncodeToString(u[:]); id[0] != '-' {
			return id
		}
	}
}
