package couchuser

import (
	"encoding/json"
	"reflect"
	"testing"
)

func TestJSON(t *testing.T) {
	tests := []struct {
		u    Ctx
		json string
	}{
		{Ctx{}, `{"name":null,"roles":[]}`},
		{Ctx{Roles: []string{}}, `{"name":null,"roles":[]}`},
		{Ctx{Name: "bob", Roles: []string{"a", "_admin"}}, `{"name":"bob","roles":["a","_admin"]}`},
	}
	for _, tt := range tests {
		b, err := json.Marshal(tt.u)
		if err != nil || string(b) != tt.json {
			t.Errorf("Marshal(%+v) = %s, %v; want %s", tt.u, b, err, tt.json)
		}
	}
	decodes := []struct {
		json string
		want Ctx
	}{
		{`{"name":null,"roles":[]}`, Ctx{}},
		{`{"roles":null}`, Ctx{}},
		{`{"name":"bob","roles":["a"]}`, Ctx{Name: "bob", Roles: []string{"a"}}},
	}
	for _, tt := range decodes {
		got := Ctx{Name: "stale", Roles: []string{"stale"}}
		if err := json.Unmarshal([]byte(tt.json), &got); err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("Unmarshal(%s) = %+v, %v; want %+v", tt.json, got, err, tt.want)
		}
	}
	if err := json.Unmarshal([]byte(`{"name":1}`), new(Ctx)); err == nil {
		t.Error("a numeric name decoded")
	}
}

func TestRoles(t *testing.T) {
	tests := []struct {
		u                           Ctx
		admin, replicator, isSystem bool
	}{
		{Ctx{}, false, false, false},
		{Ctx{Roles: []string{AdminRole}}, true, false, false},
		{Ctx{Roles: []string{ReplicatorRole}}, false, true, false},
		{Ctx{Roles: []string{AdminRole, ReplicatorRole}}, true, true, true},
	}
	for _, tt := range tests {
		if tt.u.IsAdmin() != tt.admin || tt.u.IsReplicator() != tt.replicator || tt.u.IsSystem() != tt.isSystem {
			t.Errorf("%+v: IsAdmin %v IsReplicator %v IsSystem %v", tt.u, tt.u.IsAdmin(), tt.u.IsReplicator(), tt.u.IsSystem())
		}
	}
}
