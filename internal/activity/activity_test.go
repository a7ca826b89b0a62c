package activity

import "testing"

func TestIdledSignalsOnceWhenTheLastRequestEnds(t *testing.T) {
	a := New()
	if !a.Idle() {
		t.Fatal("a new Activity is not idle")
	}
	a.Begin()
	a.Begin()
	a.End()
	if a.Idle() {
		t.Fatal("idle with one request still in progress")
	}
	select {
	case <-a.Idled():
		t.Fatal("signalled idle with one request still in progress")
	default:
	}
	a.End()
	a.Begin()
	a.End() // a second moment before the first was received: one signal held
	if !a.Idle() {
		t.Fatal("not idle after every request ended")
	}
	select {
	case <-a.Idled():
	default:
		t.Fatal("no signal when the last request ended")
	}
	select {
	case <-a.Idled():
		t.Fatal("two signals held for one waiter")
	default:
	}
}
