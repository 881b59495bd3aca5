// Package systemtest drives the whole of flashgate as it runs in production: a
// bin/ledger and a bin/proxy process over a real redis-server and PostgreSQL,
// reached only through their HTTP APIs, with Redis and Postgres read directly to
// check what they hold.
//
// Its tests are linearizability histories: concurrent clients drive reserve,
// confirm, release and get through the proxy, every call and its answer is
// recorded with its start and end time, and porcupine checks that some
// sequential order of the calls, respecting real time, is what the sequential
// model of one voucher would answer. Faults (Redis and the ledger killed
// mid-run) make some answers indeterminate; the check still has to pass. Once a
// run is over and quiet, every order still holding a use is retried by its
// customer and must get its 201, and the database and Redis are compared.
//
// The files hold one noun each: the model (model_test.go), the recorded history
// (history_test.go), the client and workload that make it (client_test.go,
// workload_test.go, run_test.go), the checks (checker_test.go), the processes
// (stack_test.go) and the tests (linearizability_test.go).
//
// The live sale of issue 12 is driven the same way: a fixed burst of reserves
// from many goroutines at a constant rate (burst_test.go) with an operator's
// call in its middle (operator_test.go), a raise of totalLimit and a pause,
// checked exactly against Postgres and Redis (livesale_test.go); and the same
// retry sent to a proxy and to the ledger's public route after each change
// that must not alter its answer (retry_test.go).
//
// The VOPR (vopr_test.go, in the spirit of TigerBeetle's) is a seeded,
// reproducible random run of the whole state machine: drivers reserve (some
// hanging up or timing out), confirm, release, refund and read through the
// proxy while an operator PATCHes limits, windows and perUserLimit, pauses and
// resumes, and faults are injected from outside at the seams (the voucher's or
// the customers' rows locked from another session, Redis paused, a voucher's
// Redis keys deleted before a warmup). After each round it checks the
// database's invariants, every answer against the rows (vopr_check_test.go),
// and that Redis equals Postgres with the reconciler off (vopr_agree_test.go);
// the operations are in vopr_ops_test.go, the faults in vopr_faults_test.go.
// Every stack ends with that agreement check too (agreement_helpers_test.go).
package systemtest
