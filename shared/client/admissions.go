package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"

	"github.com/flashgate/flashgate/shared/api"
)

// The ledger's routes of the admissions log (writePath log vouchers): the
// admissions the database refused (dead letters), their replay and
// discard, and the consumer group's lag.

// FailedAdmissions lists the refused admissions still open, oldest first
// (all: the replayed and discarded too), at most limit (1..500; 0: the
// service's default, 100).
func (c *Client) FailedAdmissions(ctx context.Context, all bool, limit int) ([]api.FailedAdmission, error) {
	v := url.Values{}
	if all {
		v.Set("all", "true")
	}
	if limit != 0 {
		v.Set("limit", strconv.Itoa(limit))
	}
	var out api.FailedAdmissionPage
	_, err := c.do(ctx, http.MethodGet, api.RouteFailedAdmissions+query(v), nil, &out)
	return out.Admissions, err
}

// ReplayAdmission reserves a refused admission again, as a reserve of its
// order would, and answers as Reserve does; a 201 closes it (replayed).
// Errors: NOT_FOUND when no open failed admission of the order exists, and
// a reserve's.
func (c *Client) ReplayAdmission(ctx context.Context, code, orderID string) (api.Receipt, error) {
	var r api.Receipt
	resp, err := c.do(ctx, http.MethodPost, api.Fill(api.RouteAdmissionReplay, code, orderID), nil, &r)
	if err != nil {
		return api.Receipt{}, err
	}
	r.Replayed = resp.Header.Get(api.HeaderReplayed) == "true"
	r.Location = resp.Header.Get(api.HeaderLocation)
	return r, nil
}

// DiscardAdmission closes a refused admission without reserving it (its
// use was given back when it was refused). Errors: NOT_FOUND when no open
// failed admission of the order exists.
func (c *Client) DiscardAdmission(ctx context.Context, code, orderID string) (api.FailedAdmission, error) {
	var f api.FailedAdmission
	_, err := c.do(ctx, http.MethodPost, api.Fill(api.RouteAdmissionDiscard, code, orderID), nil, &f)
	return f, err
}

// AdmissionsLag reads the admissions consumer group's lag as the ledger
// measures it.
func (c *Client) AdmissionsLag(ctx context.Context) (api.AdmissionsLag, error) {
	var out api.AdmissionsLag
	_, err := c.do(ctx, http.MethodGet, api.RouteAdmissionsLag, nil, &out)
	return out, err
}
