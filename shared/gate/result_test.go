package gate

import (
	"context"
	"errors"
	"testing"

	"github.com/flashgate/flashgate/shared/voucher"
)

func TestResultString(t *testing.T) {
	tests := []struct {
		r        Result
		want     string
		admitted bool
	}{
		{Reserved, "RESERVED", true},
		{Duplicate, "DUPLICATE", true},
		{OutOfStock, "OUT_OF_STOCK", false},
		{AlreadyUsed, "ALREADY_USED", false},
		{NotLoaded, "NOT_LOADED", false},
		{OrderConflict, "ORDER_CONFLICT", false},
		{Finished, "FINISHED", true},
		{Paused, "PAUSED", false},
		{NotStarted, "NOT_STARTED", false},
		{Ended, "ENDED", false},
		{TooSmall, "TOO_SMALL", false},
		{0, "Result(0)", false},
		{12, "Result(12)", false},
	}
	for _, tt := range tests {
		if got := tt.r.String(); got != tt.want {
			t.Errorf("Result(%d).String() = %q, want %q", int(tt.r), got, tt.want)
		}
		if got := tt.r.Err() == nil; got != tt.admitted {
			t.Errorf("%v.Err() == nil is %v, want %v", tt.r, got, tt.admitted)
		}
	}
}

func TestResultErr(t *testing.T) {
	tests := []struct {
		r    Result
		want error
	}{
		{Reserved, nil},
		{Duplicate, nil},
		{OutOfStock, voucher.ErrOutOfStock},
		{AlreadyUsed, voucher.ErrAlreadyUsed},
		{OrderConflict, voucher.ErrOrderConflict},
		{NotLoaded, voucher.ErrUnavailable},
		{Finished, nil},
		{Paused, voucher.ErrPaused},
		{NotStarted, voucher.ErrNotStarted},
		{Ended, voucher.ErrExpired},
		{TooSmall, voucher.ErrOrderTooSmall},
		{0, voucher.ErrUnavailable},
		{12, voucher.ErrUnavailable},
	}
	for _, tt := range tests {
		got := tt.r.Err()
		if tt.want == nil && got != nil || tt.want != nil && !errors.Is(got, tt.want) {
			t.Errorf("%v.Err() = %v, want %v", tt.r, got, tt.want)
		}
	}
}

// AdmitWarm warms up once on NotLoaded and admits again; any other answer or
// error is returned as it is, without a warmup.
func TestAdmitWarm(t *testing.T) {
	errRedis := errors.New("redis down")
	errWarm := errors.New("ledger down")
	tests := []struct {
		name     string
		answers  []Result // what admit answers, call by call
		admitErr error
		warmErr  error
		want     Result
		wantErr  error
		admits   int
		warms    int
	}{
		{"reserved", []Result{Reserved}, nil, nil, Reserved, nil, 1, 0},
		{"out of stock", []Result{OutOfStock}, nil, nil, OutOfStock, nil, 1, 0},
		{"not loaded then reserved", []Result{NotLoaded, Reserved}, nil, nil, Reserved, nil, 2, 1},
		{"not loaded twice", []Result{NotLoaded, NotLoaded}, nil, nil, NotLoaded, nil, 2, 1},
		{"warmup fails", []Result{NotLoaded}, nil, errWarm, 0, errWarm, 1, 1},
		{"admit fails", []Result{0}, errRedis, nil, 0, errRedis, 1, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			admits, warms := 0, 0
			got, err := AdmitWarm(context.Background(),
				func(context.Context) (Result, error) {
					admits++
					return tt.answers[admits-1], tt.admitErr
				},
				func(context.Context) error { warms++; return tt.warmErr })
			if got != tt.want || !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Errorf("AdmitWarm = %v, %v, want %v, %v", got, err, tt.want, tt.wantErr)
			}
			if admits != tt.admits || warms != tt.warms {
				t.Errorf("AdmitWarm made %d admits and %d warmups, want %d and %d", admits, warms, tt.admits, tt.warms)
			}
		})
	}
}
