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
	"sync"
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

	// A cluster node's links: where clients and the other nodes reach it,
	// and where it reaches them (see link). Nil for a single server.
	clientLink *link
	links      []*link
	mu         sync.Mutex
	clientAddr string // where the node listens now; "" while down
	routeAddr  string
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
	s.mu.Lock()
	s.clientAddr = ns.Addr().String()
	if a := ns.ClusterAddr(); a != nil {
		s.routeAddr = a.String()
	}
	s.mu.Unlock()
}

// addrs returns where the server listens now ("" while it is down).
func (s *Server) addrs() (client, route string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.clientAddr, s.routeAddr
}

func (s *Server) down() {
	s.mu.Lock()
	s.clientAddr, s.routeAddr = "", ""
	s.mu.Unlock()
}

// Stop shuts the server down and waits until it has. A cluster node
// shuts down gracefully: it hands the raft groups it leads to a follower
// first (Kill does not).
func (s *Server) Stop() {
	if s.Server == nil {
		return
	}
	s.down()
	s.Shutdown()
	s.WaitForShutdown()
}

// Kill stops a cluster node as a crash would (SIGKILL, a power cut): its
// links are cut first, so that its clients and the other nodes see every
// connection to it break at once and nothing it sends while it shuts
// down reaches them. The raft groups it led step down into the void, and
// the others elect new leaders only once their election timeout passes,
// as after a real crash. Its store stays: Start brings it back on it.
func (s *Server) Kill() {
	s.t.Helper()
	if s.links == nil {
		s.t.Fatal("natstest: Kill is for cluster nodes (RunCluster)")
	}
	for _, l := range s.links {
		l.setCut(true)
	}
	s.Stop()
}

// Start starts a stopped or killed server again on its store. A cluster
// node comes back on new ports behind the same links, so clients and the
// other nodes reach it where they did.
func (s *Server) Start() {
	s.t.Helper()
	if s.Server != nil && s.Running() {
		return
	}
	// Mended first: while the node is down they refuse anyway, having
	// nowhere to relay to.
	for _, l := range s.links {
		l.setCut(false)
	}
	s.start()
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
// waits until they have elected a meta leader. Every connection to a node,
// a client's or another node's, goes through a link of that node (see
// link), so that Kill can stop it as a crash would, and a restarted node
// is reached at the same addresses whatever ports it listens on now.
func RunCluster(t testing.TB, n int, opts ...Options) *Cluster {
	t.Helper()
	c := &Cluster{t: t}
	for i := 0; i < n; i++ {
		c.Servers = append(c.Servers, &Server{t: t})
	}
	// A node tells the others where its route port is, and they dial that
	// when they have no route to it yet: past the links. It says a port
	// that takes connections and drops them, so that every route is the
	// one configured, through a link.
	nowhere := newLink(t, func() string { return "" })
	// routeLinks[i][j] is how node i reaches node j.
	routeLinks := make([][]*link, n)
	for i := range routeLinks {
		routeLinks[i] = make([]*link, n)
		for j := range n {
			if i == j {
				continue
			}
			to := c.Servers[j]
			routeLinks[i][j] = newLink(t, func() string { _, r := to.addrs(); return r })
		}
	}
	for i, s := range c.Servers {
		s.clientLink = newLink(t, func() string { cl, _ := s.addrs(); return cl })
		s.links = append(s.links, s.clientLink)
		var routes []string
		for j := range n {
			if j == i {
				continue
			}
			routes = append(routes, "nats-route://"+routeLinks[i][j].addr())
			s.links = append(s.links, routeLinks[i][j], routeLinks[j][i])
		}
		o := server.Options{
			ServerName: fmt.Sprintf("n%d", i+1),
			Host:       "127.0.0.1",
			Port:       -1,
			JetStream:  true,
			StoreDir:   t.TempDir(),
			NoLog:      true,
			NoSigs:     true,
			Routes:     server.RoutesFromStr(joinComma(routes)),
		}
		o.Cluster.Name = "graphorin-test"
		o.Cluster.Host = "127.0.0.1"
		o.Cluster.Port = -1
		o.Cluster.Advertise = nowhere.addr()
		// Clients learn of the other nodes from the links they are given,
		// not from the nodes' own ports.
		o.Cluster.NoAdvertise = true
		for _, f := range opts {
			f(&o)
		}
		s.opts = o
		t.Cleanup(s.Stop)
	}
	for _, s := range c.Servers {
		s.start()
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
		urls = append(urls, "nats://"+s.clientLink.addr())
	}
	return joinComma(urls)
}

// URL returns the address clients reach this node at (its link's, for a
// cluster node).
func (s *Server) URL() string {
	if s.clientLink != nil {
		return "nats://" + s.clientLink.addr()
	}
	return s.ClientURL()
}

// Connect returns a client connected to the cluster.
func (c *Cluster) Connect(opts ...nats.Option) *nats.Conn {
	c.t.Helper()
	return connect(c.t, c.URLs(), opts...)
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
