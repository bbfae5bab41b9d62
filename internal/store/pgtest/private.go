package pgtest

import (
	"context"
	"fmt"
	"net"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Instance is a private PostgreSQL server a test starts, restarts, crashes and freezes: outage
// tests never touch the shared server on 5432, which other tests use. It runs Debian's server
// programs (pg_config --bindir) as the postgres user, since initdb refuses root, in a directory
// of its own on a free loopback port.
type Instance struct {
	t    testing.TB
	bin  string
	dir  string
	port int
	as   []string // the command prefix that runs a program as the server's owner
}

// Private starts a fresh PostgreSQL server for the test and stops it (immediately) when the
// test ends, whatever state it is in. It fails the test when the server programs are missing.
func Private(t testing.TB) *Instance {
	t.Helper()
	out, err := osexec.Command("pg_config", "--bindir").Output()
	if err != nil {
		t.Fatalf("pgtest: pg_config --bindir: %v (install PostgreSQL's server package)", err)
	}
	in := &Instance{t: t, bin: strings.TrimSpace(string(out)), port: freePort(t)}
	parent, err := os.MkdirTemp("", "parley-pg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(parent) })
	in.dir = filepath.Join(parent, "data")
	if os.Geteuid() == 0 {
		// initdb refuses root: the server runs as postgres, in a directory it owns.
		in.as = []string{"runuser", "-u", "postgres", "--"}
		if err := os.Chmod(parent, 0o755); err != nil {
			t.Fatal(err)
		}
		if out, err := osexec.Command("chown", "postgres", parent).CombinedOutput(); err != nil {
			t.Fatalf("pgtest: chown: %v: %s", err, out)
		}
	}
	in.run("initdb", "-D", in.dir, "--auth=trust", "-U", "postgres", "--no-sync", "-E", "UTF8")
	t.Cleanup(in.stop)
	in.Start()
	return in
}

// URL is the connection string of the instance's postgres database.
func (in *Instance) URL() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", in.port)
}

// Addr is the server's host:port.
func (in *Instance) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(in.port)) }

// Start starts the server and waits until it accepts connections.
func (in *Instance) Start() {
	in.t.Helper()
	in.run("pg_ctl", "-D", in.dir, "-w", "-t", "30", "-l", filepath.Join(in.dir, "server.log"), "-o",
		fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200", in.port, in.dir), "start")
	in.waitReady()
}

// Restart stops the server (fast: sessions end, the server shuts down cleanly) and starts it
// again.
func (in *Instance) Restart() {
	in.t.Helper()
	in.run("pg_ctl", "-D", in.dir, "-w", "-m", "fast", "stop")
	in.Start()
}

// Crash kills the server and every backend with SIGKILL (a power cut, as far as clients see),
// waits down for down, then starts it again, which replays its write-ahead log.
func (in *Instance) Crash(down time.Duration) {
	in.t.Helper()
	pid := in.postmaster()
	in.signalAll(pid, syscall.SIGKILL)
	for i := 0; i < 100 && alive(pid); i++ {
		time.Sleep(20 * time.Millisecond)
	}
	_ = os.Remove(filepath.Join(in.dir, "postmaster.pid"))
	time.Sleep(down)
	in.Start()
}

// Freeze stops the server and its backends (SIGSTOP): connections stay open and nothing
// answers, as with a hung host. Thaw resumes them.
func (in *Instance) Freeze() { in.signalAll(in.postmaster(), syscall.SIGSTOP) }

// Thaw resumes a frozen server.
func (in *Instance) Thaw() { in.signalAll(in.postmaster(), syscall.SIGCONT) }

func (in *Instance) stop() {
	if pid, ok := in.pid(); ok {
		in.signalAll(pid, syscall.SIGCONT) // a frozen server cannot stop
	}
	cmd := osexec.Command(filepath.Join(in.bin, "pg_ctl"), "-D", in.dir, "-w", "-t", "10", "-m", "immediate", "stop")
	if in.as != nil {
		cmd = osexec.Command(in.as[0], append(in.as[1:], cmd.Args...)...)
	}
	_ = cmd.Run()
}

func (in *Instance) run(program string, args ...string) {
	in.t.Helper()
	argv := append([]string{filepath.Join(in.bin, program)}, args...)
	if in.as != nil {
		argv = append(append([]string{}, in.as...), argv...)
	}
	if out, err := osexec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
		log, _ := os.ReadFile(filepath.Join(in.dir, "server.log"))
		in.t.Fatalf("pgtest: %s: %v\n%s\n%s", program, err, out, log)
	}
}

func (in *Instance) waitReady() {
	in.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		conn, err := pgx.Connect(ctx, in.URL())
		if err == nil {
			err = conn.Ping(ctx)
			_ = conn.Close(ctx)
		}
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			in.t.Fatalf("pgtest: the private server does not answer: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// pid reads the postmaster's process id from its pid file.
func (in *Instance) pid() (int, bool) {
	b, err := os.ReadFile(filepath.Join(in.dir, "postmaster.pid"))
	if err != nil {
		return 0, false
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(first))
	return pid, err == nil
}

func (in *Instance) postmaster() int {
	in.t.Helper()
	pid, ok := in.pid()
	if !ok {
		in.t.Fatal("pgtest: the private server is not running")
	}
	return pid
}

// signalAll sends sig to the postmaster's children, then to the postmaster (children first,
// so a stopped postmaster never sees a child die).
func (in *Instance) signalAll(pid int, sig syscall.Signal) {
	for _, c := range children(pid) {
		_ = syscall.Kill(c, sig)
	}
	_ = syscall.Kill(pid, sig)
}

// children lists the processes whose parent is pid, from /proc.
func children(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid …: comm may hold spaces, so read after the last ')'.
		s := string(stat)
		fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(fields) > 1 && fields[1] == strconv.Itoa(pid) {
			out = append(out, child)
		}
	}
	return out
}

func alive(pid int) bool { return syscall.Kill(pid, 0) == nil }

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
