package process

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Defaults that Run uses for the zero fields of a Config.
const (
	// DefaultMemoryLimitBytes is the memory ceiling of a call (RLIMIT_DATA).
	DefaultMemoryLimitBytes uint64 = 512 << 20
	// DefaultMaxProcs is the RLIMIT_NPROC of a call (see the package doc
	// for when the kernel enforces it).
	DefaultMaxProcs uint64 = 64
	// DefaultMaxOutputBytes is the most stdout a call may write.
	DefaultMaxOutputBytes int64 = 16 << 20
	// DefaultKillGrace is the time between SIGTERM and SIGKILL at the
	// deadline.
	DefaultKillGrace = 100 * time.Millisecond
)

// Config describes one process tool: the executable, its arguments, its
// environment and the limits of each call. The zero value of every field
// but Path means its default.
type Config struct {
	// Path is the executable, as an absolute path. It is not looked up
	// in PATH: the child's working directory is a fresh temporary
	// directory, so a relative path would name nothing.
	Path string
	// Args are the tool's arguments, after the program name (argv[0] is
	// Path).
	Args []string
	// Env is the whole environment of the tool, as "KEY=VALUE" entries;
	// nil or empty means an empty environment. Nothing of the worker's
	// environment is passed on: a tool that needs PATH gets it here, e.g.
	// []string{"PATH=/usr/bin:/bin"}.
	Env []string
	// MemoryLimitBytes caps the tool's writable memory (heap, anonymous
	// and private mappings) through RLIMIT_DATA; 0 means
	// DefaultMemoryLimitBytes. The brief for this package named
	// RLIMIT_AS; the package doc (# Why RLIMIT_DATA) says why that cannot
	// be the default, and AddressSpaceLimitBytes sets it where wanted.
	MemoryLimitBytes uint64
	// AddressSpaceLimitBytes, if not 0, also sets RLIMIT_AS, the total
	// virtual address space, which catches shared mappings that
	// RLIMIT_DATA does not count. Go (about 700 MiB reserved at start) and
	// Node.js tools do not start under a small one; C and Python tools do.
	AddressSpaceLimitBytes uint64
	// CPUSeconds, if not 0, is RLIMIT_CPU: at CPUSeconds of CPU time the
	// tool gets SIGXCPU and one second later SIGKILL. 0 sets no CPU limit
	// beyond the deadline.
	CPUSeconds uint64
	// MaxProcs is RLIMIT_NPROC; 0 means DefaultMaxProcs. The kernel counts
	// it per user, not per tool, and does not enforce it for root: see the
	// package doc.
	MaxProcs uint64
	// MaxOutputBytes is the most stdout a call may write; a tool that
	// writes more is killed at once and the call fails with KindOutput.
	// 0 means DefaultMaxOutputBytes.
	MaxOutputBytes int64
	// KillGrace is how long a tool has between SIGTERM, sent to its whole
	// process group at the deadline, and SIGKILL; 0 means
	// DefaultKillGrace.
	KillGrace time.Duration
	// Progress, if set, receives the progress the tool reports on stderr,
	// one line each (see ProgressPrefix). Those lines stay out of the
	// stderr tail of an error message.
	Progress func(done, total float64, message string)
}

// withDefaults checks cfg and fills in the defaults. The error is a
// KindFailed *Error: from the caller's side a tool that cannot be started
// is a failed execution.
func (cfg Config) withDefaults() (Config, error) {
	bad := func(format string, a ...any) (Config, error) {
		return cfg, &Error{Kind: KindFailed, Msg: "invalid config: " + fmt.Sprintf(format, a...)}
	}
	if cfg.Path == "" {
		return bad("no Path")
	}
	if !filepath.IsAbs(cfg.Path) {
		return bad("Path %q is not absolute", cfg.Path)
	}
	if strings.IndexByte(cfg.Path, 0) >= 0 {
		return bad("Path contains a NUL byte")
	}
	for i, a := range cfg.Args {
		if strings.IndexByte(a, 0) >= 0 {
			return bad("Args[%d] contains a NUL byte", i)
		}
	}
	for i, kv := range cfg.Env {
		if strings.IndexByte(kv, 0) >= 0 {
			return bad("Env[%d] contains a NUL byte", i)
		}
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			return bad("Env[%d] %q is not KEY=VALUE", i, kv)
		}
	}
	if cfg.MaxOutputBytes < 0 {
		return bad("negative MaxOutputBytes %d", cfg.MaxOutputBytes)
	}
	if cfg.KillGrace < 0 {
		return bad("negative KillGrace %s", cfg.KillGrace)
	}
	if cfg.MemoryLimitBytes == 0 {
		cfg.MemoryLimitBytes = DefaultMemoryLimitBytes
	}
	if cfg.MaxProcs == 0 {
		cfg.MaxProcs = DefaultMaxProcs
	}
	if cfg.MaxOutputBytes == 0 {
		cfg.MaxOutputBytes = DefaultMaxOutputBytes
	}
	if cfg.KillGrace == 0 {
		cfg.KillGrace = DefaultKillGrace
	}
	fi, err := os.Stat(cfg.Path)
	if err != nil {
		return cfg, &Error{Kind: KindFailed, Msg: "cannot start " + cfg.Path, Err: err}
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return bad("%s is not an executable file (mode %s)", cfg.Path, fi.Mode())
	}
	return cfg, nil
}

// Kind classifies a failed call. The values are the wire names of the
// matching contracts error kinds.
type Kind string

// The kinds of a failed call.
const (
	// KindTimeout: the context's deadline passed before the tool
	// finished; the tool and its process group were killed.
	KindTimeout Kind = "timeout"
	// KindViolation: the tool was stopped by a limit — killed by a signal
	// it did not handle (SIGKILL, SIGXCPU at the CPU limit, SIGSEGV, …),
	// or a Go tool's runtime died of "out of memory" under the memory
	// limit — or a process it started left its group and kept its output
	// open.
	KindViolation Kind = "sandbox_violation"
	// KindFailed: the tool exited with a code other than 0 (the message
	// has the code and the last 4 KiB of stderr), or it could not be
	// started at all.
	KindFailed Kind = "execution_failed"
	// KindOutput: stdout is not one valid JSON value, or is longer than
	// MaxOutputBytes.
	KindOutput Kind = "invalid_output"
	// KindAborted: the context was cancelled (not by its deadline) before
	// the tool finished; the tool and its process group were killed. As in
	// package wasm, so that a cancelled call is not reported as a timeout,
	// which a caller may retry.
	KindAborted Kind = "aborted"
)

// Error is the error of a failed Run. Compare kinds with errors.Is against
// &Error{Kind: …}, or read Kind after errors.As; never match the message.
type Error struct {
	// Kind says what went wrong.
	Kind Kind
	// Msg says it in words, e.g. "exit status 3; stderr: …".
	Msg string
	// Err is the underlying error, if any: the context's error for
	// KindTimeout and KindAborted, the start or I/O error for KindFailed.
	Err error
}

// Error reads like "process: execution_failed: exit status 3; stderr: …".
func (e *Error) Error() string {
	s := "process: " + string(e.Kind) + ": " + e.Msg
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns the underlying error.
func (e *Error) Unwrap() error { return e.Err }

// Is matches an *Error of the same Kind, so that
// errors.Is(err, &Error{Kind: KindTimeout}) works.
func (e *Error) Is(target error) bool {
	var t *Error
	if !errors.As(target, &t) {
		return false
	}
	return t.Kind == e.Kind
}

// ErrNoTrampoline is the Err of the KindFailed error Run returns when the
// program never called MaybeTrampoline: Run would re-execute a program
// that does not know to step aside for the tool.
var ErrNoTrampoline = errors.New("MaybeTrampoline was not called at the start of main")
