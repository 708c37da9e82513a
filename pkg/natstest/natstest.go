// Package natstest starts embedded nats-servers for tests: a single node
// with JetStream on a temporary folder, and a three-node JetStream cluster on
// loopback. Servers shut down when the test ends.
//
// It never imports services: tests of every package share it (the rule
// consul's sdk/testutil keeps).
package natstest

import (
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// Server is one embedded nats-server that a test can stop and restart on the
// same port and store.
type Server struct {
	t    testing.TB
	opts server.Options
	*server.Server
}

// Options tweaks a server before it starts.
type Options func(*server.Options)

// RunServer starts a single JetStream node on a random loopback port with
// its store in t.TempDir(), and shuts it down when the test ends.
func RunServer(t testing.TB, opts ...Options) *Server {
	t.Helper()
	o := server.Options{
		ServerName: "test",
		Host:       "127.0.0.1",
		Port:       -1,
		JetStream:  true,
		StoreDir:   t.TempDir(),
		NoLog:      true,
		NoSigs:     true,
	}
	for _, f := range opts {
		f(&o)
	}
	s := &Server{t: t, opts: o}
	s.start()
	// Later starts reuse the port first handed out, so clients reconnect.
	s.opts.Port = s.Addr().(*net.TCPAddr).Port
	t.Cleanup(s.Stop)
	return s
}

func (s *Server) start() {
	s.t.Helper()
	o := s.opts
	ns, err := server.NewServer(&o)
	if err != nil {
		s.t.Fatalf("natstest: new server: %v", err)
	}
	ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		ns.Shutdown()
		s.t.Fatalf("natstest: server %s not ready", o.ServerName)
	}
	s.Server = ns
}

// Stop shuts the server down and waits until it has.
func (s *Server) Stop() {
	if s.Server == nil {
		return
	}
	s.Shutdown()
	s.WaitForShutdown()
}

// Restart stops the server and starts it again on the same port with the
// same store, as after a crash and restart of the process.
func (s *Server) Restart() {
	s.t.Helper()
	s.Stop()
	s.start()
}

// RestartAfter stops the server, keeps it down for d, and starts it again
// on the same port with the same store: an outage of d, as when a server
// crashes and its supervisor takes a while to bring it back. Clients see
// their connection break for d; acks and keep-alives sent meanwhile are
// lost, so messages past their AckWait are redelivered at the restart.
func (s *Server) RestartAfter(d time.Duration) {
	s.t.Helper()
	s.Stop()
	time.Sleep(d) // the outage itself, not a wait for a condition
	s.start()
}

// Connect returns a client connection to the server, closed when the test
// ends. It reconnects forever, so it survives a Restart.
func (s *Server) Connect(opts ...nats.Option) *nats.Conn {
	s.t.Helper()
	return connect(s.t, s.ClientURL(), opts...)
}

func connect(t testing.TB, url string, opts ...nats.Option) *nats.Conn {
	t.Helper()
	base := []nats.Option{
		nats.MaxReconnects(-1),
		nats.ReconnectWait(50 * time.Millisecond),
		nats.Name(t.Name()),
	}
	nc, err := nats.Connect(url, append(base, opts...)...)
	if err != nil {
		t.Fatalf("natstest: connect %s: %v", url, err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// Cluster is a JetStream cluster of embedded servers on loopback.
type Cluster struct {
	t       testing.TB
	Servers []*Server
}

// RunCluster starts n JetStream servers routed to each other on loopback and
// waits until they have elected a meta leader.
func RunCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	clusterPorts := make([]int, n)
	for i := range clusterPorts {
		clusterPorts[i] = freePort(t)
	}
	c := &Cluster{t: t}
	for i := 0; i < n; i++ {
		var routes []string
		for j, p := range clusterPorts {
			if j != i {
				routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", p))
			}
		}
		i := i
		s := RunServer(t, func(o *server.Options) {
			o.ServerName = fmt.Sprintf("n%d", i+1)
			o.Cluster.Name = "graphorin-test"
			o.Cluster.Host = "127.0.0.1"
			o.Cluster.Port = clusterPorts[i]
			o.Routes = server.RoutesFromStr(joinComma(routes))
		})
		c.Servers = append(c.Servers, s)
	}
	c.WaitForMetaLeader()
	return c
}

// WaitForMetaLeader waits until some running server is the JetStream meta
// leader, knows every running server as a peer (so that an R3 stream can be
// placed), and every running server is current with it.
func (c *Cluster) WaitForMetaLeader() {
	c.t.Helper()
	WaitFor(c.t, 30*time.Second, func() error {
		running := 0
		var leader *Server
		for _, s := range c.Servers {
			if s.Server == nil || !s.Running() {
				continue
			}
			running++
			if s.JetStreamIsLeader() {
				leader = s
			}
			if !s.JetStreamIsCurrent() {
				return fmt.Errorf("server %s is not current with the meta leader", s.Name())
			}
		}
		if leader == nil {
			return fmt.Errorf("no JetStream meta leader")
		}
		if peers := len(leader.JetStreamClusterPeers()); peers < running {
			return fmt.Errorf("meta leader knows %d of %d servers", peers, running)
		}
		return nil
	})
}

// URLs returns the client URLs of all servers, comma separated, for a
// client that fails over between them.
func (c *Cluster) URLs() string {
	var urls []string
	for _, s := range c.Servers {
		urls = append(urls, fmt.Sprintf("nats://127.0.0.1:%d", s.opts.Port))
	}
	return joinComma(urls)
}

// Connect returns a client connected to the cluster.
func (c *Cluster) Connect(opts ...nats.Option) *nats.Conn {
	c.t.Helper()
	return connect(c.t, c.URLs(), opts...)
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("natstest: free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func joinComma(s []string) string {
	out := ""
	for i, v := range s {
		if i > 0 {
			out += ","
		}
		out += v
	}
	return out
}

// WaitFor polls cond every 10ms until it returns nil or d passes, then
// fails the test with cond's last error. Use it instead of sleeping.
func WaitFor(t testing.TB, d time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("natstest: condition not met within %s: %v", d, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
