package dispatcher

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// RepairRequest is what a repair hook gets (REF-X4).
type RepairRequest struct {
	ToolName    string          `json:"toolName"`
	InvalidArgs json.RawMessage `json:"invalidArgs"`
	SchemaError string          `json:"schemaError"`
}

// RepairReply is what a repair service answers: the new arguments, or none.
type RepairReply struct {
	Args json.RawMessage `json:"args,omitempty"`
}

// RepairFunc returns repaired arguments for an invalid call, or nil for
// none. An error counts as none.
type RepairFunc func(ctx context.Context, req RepairRequest) (json.RawMessage, error)

// repair gives invalid arguments their one chance (REF-X4): the Go hook,
// else the repair subject. It returns nil when there is no repair.
func (s *Service) repair(ctx context.Context, req RepairRequest) json.RawMessage {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.RepairTimeout)
	defer cancel()
	var args json.RawMessage
	switch {
	case s.cfg.Repair != nil:
		a, err := s.cfg.Repair(ctx, req)
		if err != nil {
			s.log.InfoContext(ctx, "repair hook failed", "tool", req.ToolName, "err", err)
			return nil
		}
		args = a
	case s.cfg.RepairSubject != "":
		body, _ := json.Marshal(req)
		msg, err := s.nc.RequestWithContext(ctx, s.cfg.RepairSubject, body)
		if err != nil {
			s.log.InfoContext(ctx, "repair service did not answer", "tool", req.ToolName, "subject", s.cfg.RepairSubject, "err", err)
			return nil
		}
		var reply RepairReply
		if err := json.Unmarshal(msg.Data, &reply); err != nil {
			s.log.InfoContext(ctx, "repair service answered badly", "tool", req.ToolName, "err", err)
			return nil
		}
		args = reply.Args
	default:
		return nil
	}
	if t := bytes.TrimSpace(args); len(t) == 0 || t[0] != '{' || !json.Valid(t) {
		return nil
	}
	return args
}

func repairDefaults(cfg *Config) error {
	if cfg.RepairTimeout <= 0 {
		cfg.RepairTimeout = 2 * time.Second
	}
	if cfg.Repair != nil && cfg.RepairSubject != "" {
		return fmt.Errorf("dispatcher: set Repair or RepairSubject, not both")
	}
	return nil
}
