package cluster

// Halt stops the node as a crash would: it stops listening and beating but leaves its row, so
// the others see it alive until its heartbeat goes stale.
func (n *Node) Halt() {
	n.cancel()
	n.wg.Wait()
}

// Fence makes the node act as if it lost its liveness.
func (n *Node) Fence() { n.fence() }

// Fenced reports whether the node has not re-joined since its last fence.
func (n *Node) Fenced() bool { return n.fenced.Load() }

// Deafen makes the listener ignore the node's own pings, as a listener whose connection hangs
// would.
func (n *Node) Deafen(on bool) { n.deaf.Store(on) }
