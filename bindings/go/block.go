package kcsi

/*
#include "shim.h"

static kcsi_result gk_block_mapper_new(kcsi_host *h, const char *spec, const char *pod, kcsi_block_mapper **out, gk_err *e) {
	GK_SHIM(kcsi_block_mapper_new(h, spec, pod, out, &err));
}
static kcsi_result gk_block_mapper_paths(kcsi_block_mapper *m, char **out, gk_err *e) {
	GK_SHIM(kcsi_block_mapper_paths(m, out, &err));
}
static kcsi_result gk_block_mapper_set_up_device(kcsi_block_mapper *m, char **out, gk_err *e) {
	GK_SHIM(kcsi_block_mapper_set_up_device(m, out, &err));
}
static kcsi_result gk_block_mapper_map_pod_device(kcsi_block_mapper *m, char **out, gk_err *e) {
	GK_SHIM(kcsi_block_mapper_map_pod_device(m, out, &err));
}
static kcsi_result gk_block_unmapper_new(kcsi_host *h, const char *spec_name, const char *pod_uid, kcsi_block_unmapper **out, gk_err *e) {
	GK_SHIM(kcsi_block_unmapper_new(h, spec_name, pod_uid, out, &err));
}
static kcsi_result gk_block_unmapper_unmap_pod_device(kcsi_block_unmapper *u, gk_err *e) {
	GK_SHIM(kcsi_block_unmapper_unmap_pod_device(u, &err));
}
static kcsi_result gk_block_unmapper_tear_down_device(kcsi_block_unmapper *u, const char *map_path, const char *device_path, gk_err *e) {
	GK_SHIM(kcsi_block_unmapper_tear_down_device(u, map_path, device_path, &err));
}
static kcsi_result gk_construct_block_volume_spec(kcsi_host *h, const char *pod_uid, const char *spec_name, const char *map_path, char **out, gk_err *e) {
	GK_SHIM(kcsi_construct_block_volume_spec(h, pod_uid, spec_name, map_path, out, &err));
}
*/
import "C"

import (
	"context"
	"encoding/json"
	"runtime"
)

// BlockMapper maps a volumeMode: Block PersistentVolume into one pod (the kubelet's
// CustomBlockVolumeMapper). Its methods are safe for concurrent use.
type BlockMapper struct {
	h       *handle[*C.kcsi_block_mapper]
	cleanup runtime.Cleanup
}

// BlockPaths are a BlockMapper's paths.
type BlockPaths struct {
	GlobalMapPath    string `json:"globalMapPath"`
	StagingPath      string `json:"stagingPath"`
	PublishDir       string `json:"publishDir"`
	PublishPath      string `json:"publishPath"`
	PodDeviceMapPath string `json:"podDeviceMapPath"`
	PodDeviceMapName string `json:"podDeviceMapName"`
	VolumeDataDir    string `json:"volumeDataDir"`
	MetricsPath      string `json:"metricsPath"`
}

// NewBlockMapper creates a block mapper for spec in pod (a *corev1.Pod or its JSON as
// json.RawMessage, with metadata.uid) and writes the volume's data/vol_data.json.
func (h *Host) NewBlockMapper(spec Spec, pod any) (*BlockMapper, error) {
	const op = "NewBlockMapper"
	a := newArgs(op)
	defer a.done()
	cSpec, cPod := a.json("spec", spec), a.json("pod", pod)
	if a.err != nil {
		return nil, a.err
	}
	var p *C.kcsi_block_mapper
	err := h.call(context.Background(), op, func(hp *C.kcsi_host) error {
		var e C.gk_err
		return check(op, C.gk_block_mapper_new(hp, cSpec, cPod, &p, &e), &e)
	})
	if err != nil {
		return nil, err
	}
	m := &BlockMapper{}
	m.h, m.cleanup = track(m, "block mapper", p, func(p *C.kcsi_block_mapper) { C.kcsi_block_mapper_free(p) })
	return m, nil
}

// Close frees the mapper; idempotent and safe while other calls are in flight.
func (m *BlockMapper) Close() { closeOwner(m, m.h, &m.cleanup) }

// Paths returns the mapper's paths.
func (m *BlockMapper) Paths() (*BlockPaths, error) {
	const op = "BlockMapper.Paths"
	raw, err := m.stringCall(context.Background(), op, func(p *C.kcsi_block_mapper, out **C.char, e *C.gk_err) C.kcsi_result {
		return C.gk_block_mapper_paths(p, out, e)
	})
	if err != nil {
		return nil, err
	}
	var bp BlockPaths
	if err := decode(op, raw, &bp); err != nil {
		return nil, err
	}
	return &bp, nil
}

// SetUpDevice stages the volume with block access (NodeStageVolume when the driver has
// STAGE_UNSTAGE_VOLUME) and returns the staging path, or "" when the driver does not stage.
// ctx is checked before the call; the host's timeout bounds it.
func (m *BlockMapper) SetUpDevice(ctx context.Context) (string, error) {
	return m.stringCall(ctx, "BlockMapper.SetUpDevice", func(p *C.kcsi_block_mapper, out **C.char, e *C.gk_err) C.kcsi_result {
		return C.gk_block_mapper_set_up_device(p, out, e)
	})
}

// MapPodDevice publishes the volume with block access (NodePublishVolume) and returns the
// publish path. ctx is checked before the call; the host's timeout bounds it.
func (m *BlockMapper) MapPodDevice(ctx context.Context) (string, error) {
	return m.stringCall(ctx, "BlockMapper.MapPodDevice", func(p *C.kcsi_block_mapper, out **C.char, e *C.gk_err) C.kcsi_result {
		return C.gk_block_mapper_map_pod_device(p, out, e)
	})
}

func (m *BlockMapper) stringCall(ctx context.Context, op string, fn func(*C.kcsi_block_mapper, **C.char, *C.gk_err) C.kcsi_result) (string, error) {
	var s string
	err := callOn(ctx, m, m.h, op, func(p *C.kcsi_block_mapper) error {
		var out *C.char
		var e C.gk_err
		if err := check(op, fn(p, &out, &e), &e); err != nil {
			return err
		}
		s = takeString(out)
		return nil
	})
	return s, err
}

// BlockUnmapper unmaps and tears down a block volume (the kubelet's
// CustomBlockVolumeUnmapper).
type BlockUnmapper struct {
	h       *handle[*C.kcsi_block_unmapper]
	cleanup runtime.Cleanup
}

// NewBlockUnmapper creates an unmapper from the volume's data/vol_data.json. podUID may be ""
// to only tear the device down.
func (h *Host) NewBlockUnmapper(specName, podUID string) (*BlockUnmapper, error) {
	const op = "NewBlockUnmapper"
	a := newArgs(op)
	defer a.done()
	cName, cUID := a.str("specName", specName), a.str("podUID", podUID)
	if a.err != nil {
		return nil, a.err
	}
	var p *C.kcsi_block_unmapper
	err := h.call(context.Background(), op, func(hp *C.kcsi_host) error {
		var e C.gk_err
		return check(op, C.gk_block_unmapper_new(hp, cName, cUID, &p, &e), &e)
	})
	if err != nil {
		return nil, err
	}
	u := &BlockUnmapper{}
	u.h, u.cleanup = track(u, "block unmapper", p, func(p *C.kcsi_block_unmapper) { C.kcsi_block_unmapper_free(p) })
	return u, nil
}

// Close frees the unmapper; idempotent and safe while other calls are in flight.
func (u *BlockUnmapper) Close() { closeOwner(u, u.h, &u.cleanup) }

// UnmapPodDevice unpublishes the pod's device (NodeUnpublishVolume). ctx is checked before
// the call; the host's timeout bounds it.
func (u *BlockUnmapper) UnmapPodDevice(ctx context.Context) error {
	const op = "BlockUnmapper.UnmapPodDevice"
	return callOn(ctx, u, u.h, op, func(p *C.kcsi_block_unmapper) error {
		var e C.gk_err
		return check(op, C.gk_block_unmapper_unmap_pod_device(p, &e), &e)
	})
}

// TearDownDevice unstages the volume (NodeUnstageVolume) and removes its leftover files.
// globalMapPath and devicePath are only logged, as upstream does; "" passes NULL. ctx is
// checked before the call; the host's timeout bounds it.
func (u *BlockUnmapper) TearDownDevice(ctx context.Context, globalMapPath, devicePath string) error {
	const op = "BlockUnmapper.TearDownDevice"
	a := newArgs(op)
	defer a.done()
	var cMap, cDev *C.char
	if globalMapPath != "" {
		cMap = a.str("globalMapPath", globalMapPath)
	}
	if devicePath != "" {
		cDev = a.str("devicePath", devicePath)
	}
	if a.err != nil {
		return a.err
	}
	return callOn(ctx, u, u.h, op, func(p *C.kcsi_block_unmapper) error {
		var e C.gk_err
		return check(op, C.gk_block_unmapper_tear_down_device(p, cMap, cDev, &e), &e)
	})
}

// ConstructBlockVolumeSpec rebuilds a block volume's spec after a restart from its
// data/vol_data.json. podUID and mapPath are only logged.
func (h *Host) ConstructBlockVolumeSpec(podUID, specName, mapPath string) (Spec, error) {
	const op = "ConstructBlockVolumeSpec"
	a := newArgs(op)
	defer a.done()
	cUID, cName, cPath := a.str("podUID", podUID), a.str("specName", specName), a.str("mapPath", mapPath)
	if a.err != nil {
		return Spec{}, a.err
	}
	var raw string
	err := h.call(context.Background(), op, func(p *C.kcsi_host) error {
		var out *C.char
		var e C.gk_err
		if err := check(op, C.gk_construct_block_volume_spec(p, cUID, cName, cPath, &out, &e), &e); err != nil {
			return err
		}
		raw = takeString(out)
		return nil
	})
	if err != nil {
		return Spec{}, err
	}
	return specFromJSON(op, json.RawMessage(raw))
}
