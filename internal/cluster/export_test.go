package cluster

// Halt stops the node as a crash would: it stops listening and beating but leaves its row, so
// the others see it alive until its heartbeat goes stale.
func (n *Node) Halt() {
	n.cancel()
	n.wg.Wait()
}
