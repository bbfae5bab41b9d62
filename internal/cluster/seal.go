package cluster

import (
	"encoding/base64"
	"errors"
)

// seal encrypts and authenticates a notification's payload with the cluster's key (key.go);
// open reverses it and refuses whatever the cluster's keys did not seal (another role's NOTIFY).
func (n *Node) seal(plain []byte) string {
	return base64.StdEncoding.EncodeToString(n.keys.seal(plain, []byte(noteAD)))
}

func (n *Node) open(payload string) ([]byte, error) {
	b, err := base64.StdEncoding.DecodeString(payload)
	if err != nil {
		return nil, errors.New("not a sealed notification")
	}
	return n.keys.open(b, []byte(noteAD))
}
