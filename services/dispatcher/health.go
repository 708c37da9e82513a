package dispatcher

import (
	"errors"
)

// Health says whether the dispatcher can serve calls as it should now: nil
// once it is ready and its view of live workers is current. While that
// view cannot be refreshed (an election of the heartbeat bucket, a watch
// being restarted) calls are still taken, but one to a tool it sees no
// worker for is queued blind rather than refused: a load balancer or a
// health check should prefer another dispatcher meanwhile.
func (s *Service) Health() error {
	select {
	case <-s.ready:
	default:
		return errors.New("dispatcher: starting")
	}
	if s.live.Stale() {
		return errors.New("dispatcher: the view of live workers cannot be refreshed now")
	}
	return nil
}
