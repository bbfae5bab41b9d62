package app

import (
	"fmt"
	"log/slog"
	"os"

	"parley/internal/cluster"
)

// clusterKeys are the keys that seal what the processes of a cluster send each other through
// PostgreSQL (internal/cluster/key.go). They are never in the database: each process reads
// them from its environment or a file.
type clusterKeys struct {
	current, previous []byte
	// own: none was configured and this process made one for itself (development only): it
	// works alone, and cannot talk to other processes on the same database.
	own bool
}

// readClusterKey reads one key from its variable or the file that its _FILE variable names;
// nil when neither is set.
func readClusterKey(name, value, file string) ([]byte, error) {
	switch {
	case value != "" && file != "":
		return nil, fmt.Errorf("set %s or %s_FILE, not both", name, name)
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("%s_FILE: %w", name, err)
		}
		k, err := cluster.ParseKey(string(b))
		if err != nil {
			return nil, fmt.Errorf("%s_FILE %s: %w", name, file, err)
		}
		return k, nil
	case value != "":
		k, err := cluster.ParseKey(value)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		return k, nil
	}
	return nil, nil
}

// clusterKeys reads the cluster's keys. Without one, production refuses to start: the
// processes on one database could not open each other's requests and events, and a key made
// here and kept in the database would be readable by any role that may read the tables. In
// development a process makes a key of its own, says so, and works alone.
func (c Config) clusterKeys(log *slog.Logger) (clusterKeys, error) {
	cur, err := readClusterKey("PARLEY_CLUSTER_KEY", c.ClusterKey, c.ClusterKeyFile)
	if err != nil {
		return clusterKeys{}, err
	}
	prev, err := readClusterKey("PARLEY_CLUSTER_KEY_PREVIOUS", c.ClusterKeyPrevious, c.ClusterKeyPreviousFile)
	if err != nil {
		return clusterKeys{}, err
	}
	switch {
	case cur != nil:
		return clusterKeys{current: cur, previous: prev}, nil
	case prev != nil:
		return clusterKeys{}, fmt.Errorf("PARLEY_CLUSTER_KEY_PREVIOUS is set without PARLEY_CLUSTER_KEY")
	case c.Production:
		return clusterKeys{}, fmt.Errorf("PARLEY_CLUSTER_KEY (or PARLEY_CLUSTER_KEY_FILE) must be set on PostgreSQL in production: " +
			"every process on the database seals what it sends the others with it; make one with: openssl rand -base64 32")
	}
	log.Warn("PARLEY_CLUSTER_KEY is not set: this process made a cluster key of its own, so it cannot exchange requests or events with other processes on this database; " +
		"set the same key (openssl rand -base64 32) on every process to run several, as production requires")
	return clusterKeys{current: cluster.NewKey(), own: true}, nil
}
