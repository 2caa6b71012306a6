package volumeplugin

import (
	"errors"
	"fmt"
	"strings"

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
	err = upstreamText(err)
	switch {
	case kcsi.IsUncertain(err):
		return volumetypes.NewUncertainProgressError(err.Error())
	case kcsi.IsTransient(err):
		return volumetypes.NewTransientOperationFailure(err.Error())
	}
	return err
}

// asUpstream is a kcsi error worded as upstream's plugin (pkg/volume/csi) words it
// (kcsi.Error.UpstreamMessage): without the binding's "kcsi: <Op>: <RESULT>: " prefix and the
// driver and socket kcsi names, which would otherwise reach the attach/detach controller's
// events, the kubelet's and VolumeAttachment-related messages. errors.As and errors.Is still
// find the *kcsi.Error.
type asUpstream struct{ err *kcsi.Error }

func (e asUpstream) Error() string {
	if e.err.UpstreamMessage == "" { // an error the binding made
		return e.err.Message
	}
	return e.err.UpstreamMessage
}
func (e asUpstream) Unwrap() error { return e.err }

// upstreamText words a *kcsi.Error as upstream does; any other error stays as it is.
func upstreamText(err error) error {
	if ke, ok := err.(*kcsi.Error); ok {
		return asUpstream{ke}
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

// expandFailed starts upstream's text of a failed NodeExpandVolume, which kcsi's core gives
// as the error's UpstreamMessage (expander.go nodeExpandWithClient).
const expandFailed = "Expander.NodeExpand failed to expand the volume : "

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
	err = upstreamText(err)
	switch {
	case ke.Result == kcsi.ResultNotSupported:
		return volumetypes.NewOperationNotSupportedError(err.Error())
	case ke.GRPCCode == grpcFailedPrecondition:
		// Upstream wraps the driver's error: the kubelet finds the FailedPrecondition in it.
		return fmt.Errorf(expandFailed+"%w", volumetypes.NewFailedPreconditionError(strings.TrimPrefix(err.Error(), expandFailed)))
	case ke.GRPCCode == grpcInvalidArgument || ke.GRPCCode == grpcOutOfRange || ke.GRPCCode == grpcNotFound:
		return volumetypes.NewInfeasibleError(err.Error())
	case kcsi.IsTransient(err):
		return volumetypes.NewTransientOperationFailure(err.Error())
	}
	return err
}
