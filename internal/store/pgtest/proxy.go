package pgtest

import (
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// Proxy is a TCP proxy between one process and its database, which a test cuts and heals: the
// network between a replica and PostgreSQL failing while the others keep theirs.
type Proxy struct {
	t      testing.TB
	target string
	ln     net.Listener

	mu    sync.Mutex
	mode  ProxyMode
	conns map[net.Conn]net.Conn // client side → server side
	held  chan struct{}         // closed when a black hole heals
	done  chan struct{}
	wg    sync.WaitGroup
}

// ProxyMode is what the proxy does with traffic.
type ProxyMode int

const (
	// Pass forwards everything.
	Pass ProxyMode = iota
	// Refuse closes every open connection and every new one at once: the database's host
	// answers with a reset (connection refused, as far as the client sees).
	Refuse
	// BlackHole forwards nothing, in either direction, on open and new connections alike, and
	// closes none: packets vanish, as on a partitioned network. Heal resumes the connections.
	BlackHole
)

// NewProxy listens on a free loopback port and forwards to target (host:port) until the test
// ends.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{t: t, target: target, ln: ln, conns: map[net.Conn]net.Conn{}, held: make(chan struct{}), done: make(chan struct{})}
	close(p.held)
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Set switches the proxy to mode. Refuse closes what is open; leaving BlackHole resumes what
// it held.
func (p *Proxy) Set(mode ProxyMode) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mode == mode {
		return
	}
	if p.mode == BlackHole {
		close(p.held)
	}
	if mode == BlackHole {
		p.held = make(chan struct{})
	}
	p.mode = mode
	if mode == Refuse {
		for c, s := range p.conns {
			_ = c.Close()
			_ = s.Close()
			delete(p.conns, c)
		}
	}
}

func (p *Proxy) close() {
	close(p.done)
	_ = p.ln.Close()
	p.Set(Refuse)
	p.wg.Wait()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		refuse := p.mode == Refuse
		p.mu.Unlock()
		if refuse {
			_ = c.Close()
			continue
		}
		s, err := net.DialTimeout("tcp", p.target, 5*time.Second)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		if p.mode == Refuse {
			p.mu.Unlock()
			_ = c.Close()
			_ = s.Close()
			continue
		}
		p.conns[c] = s
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(c, s, c)
		go p.pipe(s, c, c)
	}
}

// pipe copies from src to dst, holding each chunk while the proxy is a black hole.
func (p *Proxy) pipe(dst, src, key net.Conn) {
	defer p.wg.Done()
	defer func() {
		p.mu.Lock()
		if s, ok := p.conns[key]; ok {
			_ = key.Close()
			_ = s.Close()
			delete(p.conns, key)
		}
		p.mu.Unlock()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.wait() {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if err != io.EOF {
				return
			}
			return
		}
	}
}

// wait blocks while the proxy is a black hole; false when the proxy closed or refuses.
func (p *Proxy) wait() bool {
	for {
		p.mu.Lock()
		mode, held := p.mode, p.held
		p.mu.Unlock()
		switch mode {
		case Pass:
			return true
		case Refuse:
			return false
		}
		select {
		case <-held:
		case <-p.done:
			return false
		}
	}
}
