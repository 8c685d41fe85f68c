//go:build !linux

package pooling

// Without epoll a checkout peeks at each idle connection (see
// hangup_linux.go).
func watch(*ServerConn) bool { return false }

func unwatch(*ServerConn) {}
