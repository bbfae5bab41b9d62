package metrics

import "github.com/prometheus/client_golang/prometheus"

// Several processes on one PostgreSQL (internal/cluster).
var (
	// ClusterForwards counts requests this process forwarded to a conversation's owner, by
	// outcome: answered, moved (the owner did not take it; the request looked again), failed.
	ClusterForwards = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "parley_cluster_forwards_total", Help: "Requests forwarded to the process that owns the conversation.",
	}, []string{"outcome"})
	// ClusterServed counts requests this process answered for another.
	ClusterServed = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "parley_cluster_served_total", Help: "Requests answered for another process.",
	})
	// ClusterNotifications counts NOTIFY payloads sent (events, requests, replies, control).
	ClusterNotifications = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "parley_cluster_notifications_total", Help: "Notifications sent to the other processes.",
	})
	// ClusterTakeovers counts conversations this process took over from a dead or departed one.
	ClusterTakeovers = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "parley_cluster_takeovers_total", Help: "Conversations taken over from a process that died or left.",
	})
	// ClusterPeers is how many other live processes the last heartbeat saw.
	ClusterPeers = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "parley_cluster_peers", Help: "Other live processes on the same database.",
	})
	// ClusterFences counts the times this process stopped every conversation because it could
	// no longer prove it was alive (heartbeat or listening session lost).
	ClusterFences = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "parley_cluster_fences_total", Help: "Times this process stopped its conversations after losing its liveness.",
	})
	// ClusterRefused counts notifications the listener refused, by reason: unsealed (not sealed
	// with the cluster's key: someone else's NOTIFY, or a process with another key) and replayed
	// (heard before, too old, or moved from another channel). Each reason logs at most once per
	// 10 s; the counter says how many.
	ClusterRefused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "parley_cluster_notifications_refused_total", Help: "Notifications the listener refused, by reason (unsealed, replayed).",
	}, []string{"reason"})
)

func init() {
	Registry.MustRegister(ClusterForwards, ClusterServed, ClusterNotifications, ClusterTakeovers, ClusterPeers, ClusterFences, ClusterRefused)
}
