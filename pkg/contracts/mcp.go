package contracts

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// MCP at both edges. Import: MCP servers, stored in MCPServersBucket, are
// tool sources (source kind mcp) that workers with MCP hosting connect to.
// Serve: `graphorin mcp serve` is a client of the bus that speaks MCP to
// its clients.
const (
	// MCPServersBucket holds the MCP servers to import, keyed by name.
	MCPServersBucket = "graphorin_mcp_servers"
	// MCPLinksBucket records the resource links an imported server issued
	// in a run (MCPLinkKey), so that read_result resolves only those.
	MCPLinksBucket = "graphorin_mcp_links"
	// MCPCallsBucket is where `mcp serve` remembers a call that awaits
	// approval (MCPCallKey), so that the same call sent again by the same
	// caller finds it.
	MCPCallsBucket = "graphorin_mcp_calls"
	// MCPResourcePrefix starts the request subject on which the hosts of
	// an imported server resolve its resource links:
	// _GRAPHORIN.mcp.resource.<server>.
	MCPResourcePrefix = "_GRAPHORIN.mcp.resource."
	// MCPResourceQueue is the queue group those hosts answer in.
	MCPResourceQueue = "graphorin-mcp-resource"
	// MCPHandlePrefix is the scheme of a resource link's handle (REF-T12).
	MCPHandlePrefix = "mcp:"
	// MCPLinkTTL is how long an issued link stays readable.
	MCPLinkTTL = DefaultSpillTTL
)

// MaxMCPServerNameLen is the longest MCP server name.
const MaxMCPServerNameLen = 64

// ValidateMCPServerName checks an MCP server's name: 1–64 characters of
// [A-Za-z0-9_-], so that it is one subject token, one KV key and needs no
// escaping in a handle.
func ValidateMCPServerName(name string) error {
	if name == "" {
		return fmt.Errorf("contracts: MCP server name is empty")
	}
	if len(name) > MaxMCPServerNameLen {
		return fmt.Errorf("contracts: MCP server name %q is over %d characters", name, MaxMCPServerNameLen)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return fmt.Errorf("contracts: MCP server name %q has %q at byte %d; allowed are letters, digits, '_' and '-'", name, c, i)
		}
	}
	return nil
}

// MCPServer is an MCP server whose tools graphorin imports. Exactly one of
// Command (stdio) and URL (streamable HTTP) is set. Secret values are
// never stored here: SecretEnv, SecretHeaders and BearerSecret name keys
// of the hosting worker's secrets store.
type MCPServer struct {
	// Name is the server's identity: its tools' source is
	// {kind: mcp, serverIdentity: Name}.
	Name    string   `json:"name"`
	Command []string `json:"command,omitempty"`
	URL     string   `json:"url,omitempty"`
	// Env are variables of a stdio server besides the few it inherits
	// (PATH, HOME, LANG, TMPDIR); SecretEnv maps a variable to a secret.
	Env       map[string]string `json:"env,omitempty"`
	SecretEnv map[string]string `json:"secretEnv,omitempty"`
	// Headers go with every HTTP request; SecretHeaders maps a header to
	// a secret; BearerSecret sends "Authorization: Bearer <secret>".
	Headers       map[string]string `json:"headers,omitempty"`
	SecretHeaders map[string]string `json:"secretHeaders,omitempty"`
	BearerSecret  string            `json:"bearerSecret,omitempty"`
	// OAuth logs in to a server that requires OAuth with the client
	// credentials grant (no person, no browser: a worker is headless).
	OAuth *MCPOAuth `json:"oauth,omitempty"`
	// Deferred registers the server's tools deferred: found through
	// tool_search, not listed to the model up front.
	Deferred bool `json:"deferred,omitempty"`
	// TimeoutMs is the deadline of each of its tools' calls; 0 leaves it
	// to the executor.
	TimeoutMs int64     `json:"timeoutMs,omitempty"`
	AddedAt   time.Time `json:"addedAt"`
}

// MCPOAuth is how a worker logs in to an MCP server that requires OAuth:
// a client pre-registered at the server's authorization server, which it
// finds from the server's 401 (its protected-resource metadata, then the
// authorization server's metadata); the client's secret is in the
// workers' secrets store. Tokens are fetched again before they expire.
type MCPOAuth struct {
	ClientID string `json:"clientId"`
	// ClientSecret names the secret holding the client's secret.
	ClientSecret string `json:"clientSecret"`
	// Issuer, when set, is the only authorization server the secret is
	// sent to.
	Issuer string `json:"issuer,omitempty"`
}

// Validate checks a server definition.
func (s *MCPServer) Validate() error {
	if err := ValidateMCPServerName(s.Name); err != nil {
		return err
	}
	switch {
	case len(s.Command) > 0 && s.URL != "":
		return fmt.Errorf("contracts: MCP server %s has both a command and a URL; give one", s.Name)
	case len(s.Command) > 0:
		if s.Command[0] == "" {
			return fmt.Errorf("contracts: MCP server %s has an empty command", s.Name)
		}
		if len(s.Headers)+len(s.SecretHeaders) > 0 || s.BearerSecret != "" || s.OAuth != nil {
			return fmt.Errorf("contracts: MCP server %s runs a command; headers are for a URL", s.Name)
		}
	case s.URL != "":
		u, err := url.Parse(s.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("contracts: MCP server %s: URL %q is not an http or https URL", s.Name, s.URL)
		}
		if len(s.Env)+len(s.SecretEnv) > 0 {
			return fmt.Errorf("contracts: MCP server %s is reached by URL; environment variables are for a command", s.Name)
		}
		if o := s.OAuth; o != nil {
			if o.ClientID == "" || o.ClientSecret == "" {
				return fmt.Errorf("contracts: MCP server %s: OAuth needs a client id and the secret of its client secret", s.Name)
			}
			if s.BearerSecret != "" {
				return fmt.Errorf("contracts: MCP server %s: a bearer secret and OAuth both set the Authorization header; give one", s.Name)
			}
		}
	default:
		return fmt.Errorf("contracts: MCP server %s needs a command or a URL", s.Name)
	}
	if s.TimeoutMs < 0 {
		return fmt.Errorf("contracts: MCP server %s: negative timeout", s.Name)
	}
	return nil
}

// SecretKeys returns the secrets the server needs, sorted, each once.
func (s *MCPServer) SecretKeys() []string {
	seen := map[string]bool{}
	var out []string
	add := func(k string) {
		if k != "" && !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	for _, k := range s.SecretEnv {
		add(k)
	}
	for _, k := range s.SecretHeaders {
		add(k)
	}
	add(s.BearerSecret)
	if s.OAuth != nil {
		add(s.OAuth.ClientSecret)
	}
	slices.Sort(out)
	return out
}

// MCPServersBucketConfig is the bucket of MCP servers to import.
func MCPServersBucketConfig(replicas int) jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{
		Bucket:      MCPServersBucket,
		Description: "graphorin: MCP servers whose tools workers import",
		History:     5,
		Storage:     jetstream.FileStorage,
		Replicas:    max(replicas, 1),
	}
}

// MCPLinksBucketConfig keeps issued resource links as long as spilled
// results are kept.
func MCPLinksBucketConfig(replicas int) jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{
		Bucket:      MCPLinksBucket,
		Description: "graphorin: resource links imported MCP servers issued, by run",
		History:     1,
		TTL:         MCPLinkTTL,
		Storage:     jetstream.FileStorage,
		Replicas:    max(replicas, 1),
	}
}

// MCPCallsBucketConfig keeps the calls `mcp serve` sent that await
// approval, a week, as long as a run's results are kept.
func MCPCallsBucketConfig(replicas int) jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{
		Bucket:      MCPCallsBucket,
		Description: "graphorin: MCP calls awaiting approval, by caller, run, tool and arguments",
		History:     1,
		TTL:         DefaultSpillTTL,
		Storage:     jetstream.FileStorage,
		Replicas:    max(replicas, 1),
	}
}

// MCPHandle is the handle of a resource link an imported server issued
// (REF-T12): mcp:<urlencoded server>:<uri>.
func MCPHandle(server, uri string) string {
	return MCPHandlePrefix + url.QueryEscape(server) + ":" + uri
}

// MCPRef is a parsed MCP handle.
type MCPRef struct {
	Server string
	URI    string
}

// Handle renders the handle back.
func (r MCPRef) Handle() string { return MCPHandle(r.Server, r.URI) }

// ParseMCPHandle parses an MCP handle strictly: the scheme, a valid server
// name (URL-encoded), ':', and a URI of printable characters without
// spaces. Anything else is ErrBadHandle.
func ParseMCPHandle(h string) (MCPRef, error) {
	if len(h) > MaxHandleLen || !strings.HasPrefix(h, MCPHandlePrefix) {
		return MCPRef{}, ErrBadHandle
	}
	enc, uri, ok := strings.Cut(h[len(MCPHandlePrefix):], ":")
	if !ok || uri == "" {
		return MCPRef{}, ErrBadHandle
	}
	server, err := url.QueryUnescape(enc)
	if err != nil || ValidateMCPServerName(server) != nil || url.QueryEscape(server) != enc {
		return MCPRef{}, ErrBadHandle
	}
	for i := 0; i < len(uri); i++ {
		if c := uri[i]; c <= ' ' || c == 0x7f {
			return MCPRef{}, ErrBadHandle
		}
	}
	return MCPRef{Server: server, URI: uri}, nil
}

// MCPLinkKey is the links bucket key of a handle issued in a run.
func MCPLinkKey(run RunKey, handle string) string {
	sum := sha256.Sum256([]byte(string(run) + "\x00" + handle))
	return hex.EncodeToString(sum[:20])
}

// MCPLink is a resource link an imported server issued in a run.
type MCPLink struct {
	RunID    string    `json:"runId"`
	CallID   string    `json:"callId"`
	Tool     string    `json:"tool"`
	Server   string    `json:"server"`
	URI      string    `json:"uri"`
	Name     string    `json:"name,omitempty"`
	MIMEType string    `json:"mimeType,omitempty"`
	IssuedAt time.Time `json:"issuedAt"`
}

// MCPResourceObject is the spill-store object a resource link's body is
// kept in once read: in the run's folder, named after the handle, so
// that it is cleared with the run and paged like any spilled result.
func MCPResourceObject(runID, handle, ext string) SpillRef {
	sum := sha256.Sum256([]byte(handle))
	return SpillRef{RunID: runID, CallID: "mcp-" + hex.EncodeToString(sum[:20]), Ext: ext}
}

// MCPResourceSubject is where the hosts of server resolve its links.
func MCPResourceSubject(server string) string { return MCPResourcePrefix + server }

// MCPResourceRequest asks an imported server's host to make a link issued
// in RunID readable.
type MCPResourceRequest struct {
	RunID  string `json:"runId"`
	Scope  Scope  `json:"scope,omitempty"`
	Handle string `json:"handle"`
}

// Run is the key of the run the link is read in.
func (r MCPResourceRequest) Run() RunKey { return r.Scope.Run(r.RunID) }

// MCPResourceReply names the spill-store object holding the link's body,
// or says why there is none.
type MCPResourceReply struct {
	RunID  string     `json:"runId,omitempty"`
	CallID string     `json:"callId,omitempty"`
	Ext    string     `json:"ext,omitempty"`
	Error  *ToolError `json:"error,omitempty"`
}

// Ref is the reply's object.
func (r MCPResourceReply) Ref() SpillRef {
	return SpillRef{RunID: r.RunID, CallID: r.CallID, Ext: r.Ext}
}

// ResourceLinkText is what the model sees of a resource link an imported
// tool returned: its name and type, and how to read it.
func ResourceLinkText(handle, name, mimeType string) string {
	var b strings.Builder
	b.WriteString("[Resource link")
	if name != "" {
		b.WriteString(" ")
		b.WriteString(fmt.Sprintf("%q", name))
	}
	if mimeType != "" {
		b.WriteString(" (" + mimeType + ")")
	}
	b.WriteString(". Call read_result with handle ")
	b.WriteString(fmt.Sprintf("%q", handle))
	b.WriteString(" to read it - optionally narrow with offset/length (bytes) or startLine/endLine.]")
	return b.String()
}

// RegistryDefsSubject is the request for the model-facing tool
// definitions in one provider's format (body DefsRequest).
const RegistryDefsSubject = "graphorin.registry.defs"

// DefsRequest asks for the catalogue in a provider's format: openai
// (chat completions), openai-responses, anthropic, gemini or mcp.
type DefsRequest struct {
	Format string `json:"format"`
}

// MCPStatusBucket holds how each host of an imported server is doing
// (MCPStatusKey): connected with its tools, or failing and why. `mcp ls`
// reads it, so that a server with no tools says why (a missing secret, a
// command that exits) where the person who added it looks, not only in
// the logs of the worker that hosts it.
const MCPStatusBucket = "graphorin_mcp_status"

// MCPStatusTTL is how long a host's status is kept unless refreshed: a
// host that died without a word is gone from `mcp ls` after it.
const MCPStatusTTL = 2 * time.Minute

// MCPStatusBucketConfig is the bucket of MCP hosts' statuses.
func MCPStatusBucketConfig(replicas int) jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{
		Bucket:      MCPStatusBucket,
		Description: "graphorin: how the hosts of imported MCP servers are doing",
		History:     1,
		TTL:         MCPStatusTTL,
		Storage:     jetstream.FileStorage,
		Replicas:    max(replicas, 1),
	}
}

// MCPStatusKey is the status key of one host of a server: <server>.<host>
// (the host id hashed when it is no KV key token).
func MCPStatusKey(server, host string) string {
	if ValidateID("host", host) != nil {
		sum := sha256.Sum256([]byte(host))
		host = hex.EncodeToString(sum[:10])
	}
	return server + "." + host
}

// The states of an MCP host.
const (
	MCPConnected = "connected"
	MCPFailing   = "failing"
)

// MCPStatus is how one host of an imported server is doing.
type MCPStatus struct {
	Server string `json:"server"`
	Host   string `json:"host"`
	// State is connected or failing; Error says why it fails (the last
	// attempt), Tools how many tools its session lists.
	State string `json:"state"`
	Tools int    `json:"tools"`
	Error string `json:"error,omitempty"`
	// Recoverable says whether trying again may work (a server or an
	// authorization server that cannot be reached) or not before a person
	// changes something (credentials refused); Hint says what to do.
	Recoverable bool      `json:"recoverable,omitempty"`
	Hint        string    `json:"hint,omitempty"`
	Since       time.Time `json:"since"`
	At          time.Time `json:"at"`
}
