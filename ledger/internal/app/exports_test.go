package app

// ReadyEvery is readyEvery for the external tests of readiness.
const ReadyEvery = readyEvery
