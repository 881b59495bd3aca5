package main

import (
	"os"
	"testing"

	"github.com/flashgate/flashgate/ledger/internal/ledgertest"
)

func TestMain(m *testing.M) { os.Exit(ledgertest.RunTests(m)) }
