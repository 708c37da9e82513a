package demotools

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/tool"
)

// RefundInput is the input of refund.create.
type RefundInput struct {
	OrderID   string  `json:"orderId" desc:"The order to refund." jsonschema:"minLength=1,maxLength=64"`
	AmountUsd float64 `json:"amountUsd" desc:"Amount to refund, in US dollars." jsonschema:"exclusiveMinimum=0"`
	// ToIBAN sends the refund to a bank account instead of the card the
	// order was paid with.
	ToIBAN string `json:"toIban,omitempty" desc:"Bank account (IBAN) to refund to, instead of the card the order was paid with." jsonschema:"maxLength=64"`
}

// RefundOutput confirms a refund.
type RefundOutput struct {
	RefundID  string  `json:"refundId"`
	OrderID   string  `json:"orderId"`
	AmountUsd float64 `json:"amountUsd"`
	Status    string  `json:"status"`
}

// RefundApprovalThreshold is the amount from which a refund waits for a
// person.
const RefundApprovalThreshold = 100

// RefundSubject is where each real execution of refund.create for an
// order is recorded (in EffectStream), so that tests can count them.
func RefundSubject(orderID string) string { return EffectSubject("refund/" + orderID) }

// Refund returns refund.create {orderId, amountUsd}: an external-stateful
// tool that needs a person's approval when amountUsd ≥ 100 (a declarative
// rule the dispatcher evaluates). Each real execution is recorded on
// RefundSubject(orderId); replicas is EffectStream's, when this makes it.
func Refund(ctx context.Context, js jetstream.JetStream, replicas int) (*tool.Tool, error) {
	if err := openEffectStream(ctx, js, replicas); err != nil {
		return nil, err
	}
	threshold, _ := json.Marshal(RefundApprovalThreshold)
	return tool.Define(tool.Spec[RefundInput, RefundOutput]{
		Name:            "refund.create",
		Description:     "Refunds an order. Refunds of $100 or more wait for a person's approval.",
		SideEffectClass: contracts.ExternalStateful,
		Tags:            []string{"payments", "demo"},
		ApprovalRule:    &contracts.ApprovalRule{Path: "/amountUsd", Op: "ge", Value: threshold},
		IdempotencyKey:  func(in RefundInput) string { return "refund/" + in.OrderID },
		Run: func(ctx context.Context, in RefundInput) (RefundOutput, error) {
			out := RefundOutput{RefundID: "rf_" + in.OrderID, OrderID: in.OrderID, AmountUsd: in.AmountUsd, Status: "refunded"}
			body, _ := json.Marshal(out)
			if _, err := js.Publish(ctx, RefundSubject(in.OrderID), body); err != nil {
				return RefundOutput{}, fmt.Errorf("recording the refund: %w", err)
			}
			return out, nil
		},
	})
}
