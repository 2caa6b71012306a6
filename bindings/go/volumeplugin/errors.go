package volumeplugin

import (
	"errors"
	"fmt"

	volumetypes "k8s.io/kubernetes/pkg/volume/util/types"
	"kcsi.dev/kcsi"
)

// kubeletError gives a kcsi error the type the kubelet's operation executor acts on: an
// uncertain one may still be in progress in the driver (the volume is treated as possibly
// mounted), a transient one changed nothing. Final errors keep their *kcsi.Error, so
// errors.Is against kcsi's sentinels still works.
func kubeletError(err error) error {
	if err == nil {
		return nil
	}
	switch {
	case kcsi.IsUncertain(err):
		return volumetypes.NewUncertainProgressError(err.Error())
	case kcsi.IsTransient(err):
		return volumetypes.NewTransientOperationFailure(err.Error())
	}
	return err
}

// errNotInitialized is returned by every call before Init.
var errNotInitialized = errors.New("kcsi volume plugin: Init has not been called")

func invalid(format string, args ...any) error {
	return fmt.Errorf("kcsi volume plugin: "+format, args...)
}

// gRPC codes NodeExpand distinguishes (google.golang.org/grpc/codes).
const (
	grpcInvalidArgument    = 3
	grpcNotFound           = 5
	grpcFailedPrecondition = 9
	grpcOutOfRange         = 11
)

// expandError gives a NodeExpand failure upstream's types (expander.go nodeExpandWithClient):
// no EXPAND_VOLUME is OperationNotSupported, a volume in use FailedPrecondition, an
// impossible size Infeasible, each of which the kubelet's resize code acts on. Only a driver
// that is not registered is transient; everything else is final, even a gRPC code the CSI
// client calls uncertain, because upstream wraps it with fmt.Errorf: the kubelet marks the
// expansion failed and sets the PVC condition instead of retrying it as in progress.
func expandError(err error) error {
	var ke *kcsi.Error
	if !errors.As(err, &ke) {
		return kubeletError(err)
	}
	switch {
	case ke.Result == kcsi.ResultNotSupported:
		return volumetypes.NewOperationNotSupportedError(err.Error())
	case ke.GRPCCode == grpcFailedPrecondition:
		return fmt.Errorf("Expander.NodeExpand failed to expand the volume : %w", volumetypes.NewFailedPreconditionError(err.Error()))
	case ke.GRPCCode == grpcInvalidArgument || ke.GRPCCode == grpcOutOfRange || ke.GRPCCode == grpcNotFound:
		return volumetypes.NewInfeasibleError("Expander.NodeExpand failed to expand the volume " + err.Error())
	case kcsi.IsTransient(err):
		return volumetypes.NewTransientOperationFailure(err.Error())
	}
	return err
}
