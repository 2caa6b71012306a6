package kcsi

/*
#include "shim.h"
*/
import "C"

import "context"

// Driver is one registered CSI driver, as kcsi_list_drivers reports it.
type Driver struct {
	Name                    string `json:"name"`
	Endpoint                string `json:"endpoint"`
	HighestSupportedVersion string `json:"highestSupportedVersion"`
	// NodeID, MaxVolumesPerNode and Topology come from the driver's NodeGetInfo; they are
	// empty while a registration is still in progress.
	NodeID            string            `json:"nodeId"`
	MaxVolumesPerNode int64             `json:"maxVolumesPerNode"`
	Topology          map[string]string `json:"topology"`
}

// ValidatePlugin checks a driver's name, endpoint and supported versions as the kubelet's
// ValidatePlugin does, without registering anything. It does not block.
func (h *Host) ValidatePlugin(name, endpoint string, versions []string) error {
	const op = "ValidatePlugin"
	a := newArgs(op)
	defer a.done()
	cName, cEndpoint := a.str("name", name), a.str("endpoint", endpoint)
	vs, n := a.strs("versions", versions)
	if a.err != nil {
		return a.err
	}
	return h.call(context.Background(), op, func(p *C.kcsi_host) error {
		var e C.gk_err
		return check(op, C.gk_validate_plugin(p, cName, cEndpoint, vs, n, &e), &e)
	})
}

// RegisterPlugin registers a CSI driver as the kubelet's RegisterPlugin does: it stores the
// driver, calls NodeGetInfo on its socket and publishes the node info; any failure rolls the
// registration back. ctx's deadline bounds the whole call (none: the host's timeout). A
// driver already registered with an equal or higher version gives ErrAlreadyExists.
func (h *Host) RegisterPlugin(ctx context.Context, name, endpoint string, versions []string) error {
	const op = "RegisterPlugin"
	ms, err := timeoutMS(ctx, op)
	if err != nil {
		return err
	}
	a := newArgs(op)
	defer a.done()
	cName, cEndpoint := a.str("name", name), a.str("endpoint", endpoint)
	vs, n := a.strs("versions", versions)
	if a.err != nil {
		return a.err
	}
	return h.call(ctx, op, func(p *C.kcsi_host) error {
		var e C.gk_err
		return check(op, C.gk_register_plugin(p, cName, cEndpoint, vs, n, ms, &e), &e)
	})
}

// DeregisterPlugin removes a driver and its node info. ErrNotFound when no driver of that
// name is registered (node info is cleaned up all the same). The C call has no timeout
// argument: ctx is checked before it starts and the host's timeout bounds it.
func (h *Host) DeregisterPlugin(ctx context.Context, name string) error {
	const op = "DeregisterPlugin"
	a := newArgs(op)
	defer a.done()
	cName := a.str("name", name)
	if a.err != nil {
		return a.err
	}
	return h.call(ctx, op, func(p *C.kcsi_host) error {
		var e C.gk_err
		return check(op, C.gk_deregister_plugin(p, cName, &e), &e)
	})
}

// Drivers lists the registered drivers, sorted by name.
func (h *Host) Drivers() ([]Driver, error) {
	raw, err := h.DriversJSON()
	if err != nil {
		return nil, err
	}
	var ds []Driver
	if err := decode("Drivers", raw, &ds); err != nil {
		return nil, err
	}
	return ds, nil
}

// DriversJSON is Drivers as kcsi's JSON text, including fields Driver does not name.
func (h *Host) DriversJSON() (string, error) {
	const op = "Drivers"
	var raw string
	err := h.call(context.Background(), op, func(p *C.kcsi_host) error {
		var out *C.char
		var e C.gk_err
		if err := check(op, C.gk_list_drivers(p, &out, &e), &e); err != nil {
			return err
		}
		raw = takeString(out)
		return nil
	})
	return raw, err
}
