package main

import (
	"context"
	"os"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
	"k8s.io/klog/v2"
)

const defaultSize = 1 << 30 // 1 GiB when CreateVolume names no capacity

// Identity

func (d *driver) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: d.cfg.driverName, VendorVersion: vendorVersion}, nil
}

func (d *driver) GetPluginCapabilities(context.Context, *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	svc := func(t csi.PluginCapability_Service_Type) *csi.PluginCapability {
		return &csi.PluginCapability{Type: &csi.PluginCapability_Service_{Service: &csi.PluginCapability_Service{Type: t}}}
	}
	caps := []*csi.PluginCapability{svc(csi.PluginCapability_Service_CONTROLLER_SERVICE)}
	if d.cfg.enableTopology {
		caps = append(caps, svc(csi.PluginCapability_Service_VOLUME_ACCESSIBILITY_CONSTRAINTS))
	}
	caps = append(caps, &csi.PluginCapability{Type: &csi.PluginCapability_VolumeExpansion_{
		VolumeExpansion: &csi.PluginCapability_VolumeExpansion{Type: csi.PluginCapability_VolumeExpansion_ONLINE}}})
	return &csi.GetPluginCapabilitiesResponse{Capabilities: caps}, nil
}

func (d *driver) Probe(context.Context, *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	return &csi.ProbeResponse{Ready: wrapperspb.Bool(true)}, nil
}

// Controller

func (d *driver) ControllerGetCapabilities(context.Context, *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	var caps []*csi.ControllerServiceCapability
	for _, t := range []csi.ControllerServiceCapability_RPC_Type{
		csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME,
		csi.ControllerServiceCapability_RPC_EXPAND_VOLUME,
	} {
		caps = append(caps, &csi.ControllerServiceCapability{Type: &csi.ControllerServiceCapability_Rpc{
			Rpc: &csi.ControllerServiceCapability_RPC{Type: t}}})
	}
	return &csi.ControllerGetCapabilitiesResponse{Capabilities: caps}, nil
}

// accessType reports whether caps ask for block access; both block and mount is an error.
func accessType(caps ...*csi.VolumeCapability) (block bool, err error) {
	mnt := false
	for _, c := range caps {
		block = block || c.GetBlock() != nil
		mnt = mnt || c.GetMount() != nil
	}
	if block && mnt {
		return false, status.Error(codes.InvalidArgument, "cannot have both block and mount access type")
	}
	return block, nil
}

func (d *driver) CreateVolume(_ context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	if req.GetName() == "" {
		return nil, status.Error(codes.InvalidArgument, "Name missing in request")
	}
	if len(req.GetVolumeCapabilities()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "Volume Capabilities missing in request")
	}
	block, err := accessType(req.GetVolumeCapabilities()...)
	if err != nil {
		return nil, err
	}
	if req.GetVolumeContentSource() != nil {
		return nil, status.Error(codes.InvalidArgument, "volume content sources (snapshots, clones) are not supported by the stand-in")
	}
	size, limit := req.GetCapacityRange().GetRequiredBytes(), req.GetCapacityRange().GetLimitBytes()
	if size == 0 {
		size = defaultSize
		if limit > 0 && limit < size {
			size = limit
		}
	}
	if limit > 0 && size > limit {
		return nil, status.Errorf(codes.InvalidArgument, "required_bytes %d exceeds limit_bytes %d", size, limit)
	}

	d.mu.Lock()
	defer d.mu.Unlock()
	for _, v := range d.volumes {
		if v.Name != req.GetName() {
			continue
		}
		if v.Size < size || v.Block != block {
			return nil, status.Errorf(codes.AlreadyExists, "volume with the same name %q but different size or access type already exists", v.Name)
		}
		return d.createResponse(v, req), nil
	}
	v := &volume{ID: newUUID(), Name: req.GetName(), Size: size, Block: block}
	if err := d.createBacking(v); err != nil {
		return nil, status.Errorf(codes.Internal, "failed to create volume %s: %v", v.ID, err)
	}
	d.volumes[v.ID] = v
	if err := d.save(); err != nil {
		return nil, status.Errorf(codes.Internal, "saving state: %v", err)
	}
	klog.V(4).Infof("created volume %s (%s, %d bytes, block=%v)", v.ID, v.Name, v.Size, v.Block)
	return d.createResponse(v, req), nil
}

func (d *driver) createResponse(v *volume, req *csi.CreateVolumeRequest) *csi.CreateVolumeResponse {
	return &csi.CreateVolumeResponse{Volume: &csi.Volume{
		VolumeId: v.ID, CapacityBytes: v.Size, VolumeContext: req.GetParameters(), AccessibleTopology: d.topology()}}
}

func (d *driver) DeleteVolume(_ context.Context, req *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "Volume ID missing in request")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	v := d.volumes[req.GetVolumeId()]
	if v == nil {
		return &csi.DeleteVolumeResponse{}, nil // already gone: idempotent
	}
	if v.StagedPath != "" || len(v.Published) > 0 {
		return nil, status.Errorf(codes.FailedPrecondition, "volume %s is still in use (staged at %q, published at %d target(s))",
			v.ID, v.StagedPath, len(v.Published))
	}
	if v.Block {
		if err := detachLoop(d.volPath(v.ID)); err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
	}
	if err := os.RemoveAll(d.volPath(v.ID)); err != nil {
		return nil, status.Errorf(codes.Internal, "failed to delete volume %s: %v", v.ID, err)
	}
	delete(d.volumes, v.ID)
	if err := d.save(); err != nil {
		return nil, status.Errorf(codes.Internal, "saving state: %v", err)
	}
	klog.V(4).Infof("deleted volume %s", v.ID)
	return &csi.DeleteVolumeResponse{}, nil
}

func (d *driver) ControllerExpandVolume(_ context.Context, req *csi.ControllerExpandVolumeRequest) (*csi.ControllerExpandVolumeResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "Volume ID missing in request")
	}
	if req.GetCapacityRange() == nil {
		return nil, status.Error(codes.InvalidArgument, "Capacity range not provided")
	}
	size, limit := req.GetCapacityRange().GetRequiredBytes(), req.GetCapacityRange().GetLimitBytes()
	if limit > 0 && size > limit {
		return nil, status.Errorf(codes.OutOfRange, "required_bytes %d exceeds limit_bytes %d", size, limit)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	v := d.volumes[req.GetVolumeId()]
	if v == nil {
		return nil, status.Errorf(codes.NotFound, "volume %s not found", req.GetVolumeId())
	}
	if size > v.Size {
		if v.Block {
			if err := os.Truncate(d.volPath(v.ID), size); err != nil {
				return nil, status.Errorf(codes.Internal, "growing %s: %v", v.ID, err)
			}
		}
		v.Size = size
		if err := d.save(); err != nil {
			return nil, status.Errorf(codes.Internal, "saving state: %v", err)
		}
	}
	return &csi.ControllerExpandVolumeResponse{CapacityBytes: v.Size, NodeExpansionRequired: v.Block}, nil
}

func (d *driver) ValidateVolumeCapabilities(_ context.Context, req *csi.ValidateVolumeCapabilitiesRequest) (*csi.ValidateVolumeCapabilitiesResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "Volume ID missing in request")
	}
	if len(req.GetVolumeCapabilities()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "Volume Capabilities missing in request")
	}
	d.mu.Lock()
	v := d.volumes[req.GetVolumeId()]
	d.mu.Unlock()
	if v == nil {
		return nil, status.Errorf(codes.NotFound, "volume %s not found", req.GetVolumeId())
	}
	for _, c := range req.GetVolumeCapabilities() {
		if (c.GetBlock() != nil) != v.Block {
			return &csi.ValidateVolumeCapabilitiesResponse{Message: "access type does not match the volume"}, nil
		}
	}
	return &csi.ValidateVolumeCapabilitiesResponse{Confirmed: &csi.ValidateVolumeCapabilitiesResponse_Confirmed{
		VolumeContext: req.GetVolumeContext(), VolumeCapabilities: req.GetVolumeCapabilities(), Parameters: req.GetParameters()}}, nil
}
