package coordinator

import (
	"github.com/pgfleet/pgfleet/internal/pgerr"
	"github.com/pgfleet/pgfleet/planner"
)

// runFunction runs a catalog function called with a simple query.
func (ss *session) runFunction(p *planner.Plan) error {
	return ss.queryError(pgerr.New(pgerr.FeatureNotSupported, "%s is not available yet", p.Func))
}
