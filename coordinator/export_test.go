package coordinator

import (
	"context"
	"time"
)

// RecoverPrepared runs one recovery round with the given grace and returns
// how many prepared transactions it committed and rolled back.
func (s *Server) RecoverPrepared(ctx context.Context, grace time.Duration) (committed, aborted int) {
	st := s.recoverPrepared(ctx, grace)
	return st.committed, st.aborted
}
