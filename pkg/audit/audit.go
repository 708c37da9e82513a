// Package audit publishes audit rows (REF audit events) on the audit
// stream, where they are kept 30 days (contracts.AuditStreamConfig).
package audit

import (
	"context"
	"encoding/json"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/graphorin/graphorin-go/pkg/contracts"
)

// Publish stores row on audit.<action>, deduplicated by id within the
// stream's window, so that a redelivered call or a second service
// computing the same row audits once. It stamps the row's time when it
// has none.
func Publish(ctx context.Context, js jetstream.JetStream, row contracts.AuditRow, id string) error {
	if row.TS.IsZero() {
		row.TS = time.Now().UTC()
	}
	body, err := json.Marshal(row)
	if err != nil {
		return err
	}
	m := &nats.Msg{Subject: contracts.AuditSubject(row.Action), Header: nats.Header{}, Data: body}
	m.Header.Set(contracts.HeaderMsgID, id)
	_, err = js.PublishMsg(ctx, m)
	return err
}
