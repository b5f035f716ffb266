package ca

import (
	"context"
	"crypto/ecdsa"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// RotateOptions are the inputs of RotateRoot.
type RotateOptions struct {
	// Namespace holds istio-ca-secret.
	Namespace string
	// Finish takes the second step; without it, the first.
	Finish bool
	// Overlap is the least time between the two steps: the longest lifetime
	// of a workload certificate issued before the first (pilot-agent asks
	// for 24h by default).
	Overlap time.Duration
	// Force finishes before the overlap has passed.
	Force bool
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

// RotationStatus describes the CA Secret after RotateRoot or for RootStatus.
type RotationStatus struct {
	// Step is "none" (one root), "started" (two roots, signing through the
	// cross-signed certificate) or "finished" (the step just taken).
	Step string
	// Roots are the trust anchors, as subject and SHA-256 fingerprint.
	Roots []string
	// Signer is the subject of the signing certificate.
	Signer string
	// Started is when the rotation in progress started.
	Started time.Time
	// FinishAfter is when the overlap ends.
	FinishAfter time.Time
}

// RootStatus reads istio-ca-secret and says whether a rotation is in progress.
func RootStatus(ctx context.Context, client kubernetes.Interface, namespace string, overlap time.Duration) (RotationStatus, error) {
	if err := refusePluggedIn(ctx, client, namespace); err != nil {
		return RotationStatus{}, err
	}
	s, err := client.CoreV1().Secrets(namespace).Get(ctx, SecretSelfSigned, metav1.GetOptions{})
	if err != nil {
		return RotationStatus{}, fmt.Errorf("get secret %s/%s: %w", namespace, SecretSelfSigned, err)
	}
	b, err := parseSecret(s)
	if err != nil {
		return RotationStatus{}, err
	}
	return statusOf(b, s.Annotations, overlap), nil
}

// RotateRoot takes one step of a root rotation (rotate.go) on
// istio-ca-secret. Every replica picks the change up from its watch of the
// Secret and publishes the new trust bundle; nothing restarts. It refuses
// when cacerts is in force (the operator's CA), and refuses to finish
// before the overlap unless forced.
func RotateRoot(ctx context.Context, client kubernetes.Interface, o RotateOptions) (RotationStatus, error) {
	now := time.Now
	if o.Now != nil {
		now = o.Now
	}
	if err := refusePluggedIn(ctx, client, o.Namespace); err != nil {
		return RotationStatus{}, err
	}
	secrets := client.CoreV1().Secrets(o.Namespace)
	s, err := secrets.Get(ctx, SecretSelfSigned, metav1.GetOptions{})
	if err != nil {
		return RotationStatus{}, fmt.Errorf("get secret %s/%s (the CA creates it at its first start): %w", o.Namespace, SecretSelfSigned, err)
	}
	cur, err := parseSecret(s)
	if err != nil {
		return RotationStatus{}, err
	}
	var next *Bundle
	t := now()
	if s.Annotations == nil {
		s.Annotations = map[string]string{}
	}
	if o.Finish {
		st := statusOf(cur, s.Annotations, o.Overlap)
		if st.Step != "started" {
			return st, errors.New("no root rotation is in progress: start one with `discovery ca rotate`")
		}
		if t.Before(st.FinishAfter) && !o.Force {
			return st, fmt.Errorf("the overlap has not passed: the rotation started at %s and certificates issued under the old root alone may be in use until %s (--overlap %s); finishing now would make peers that trust only the new root refuse them (--force to finish anyway)",
				st.Started.UTC().Format(time.RFC3339), st.FinishAfter.UTC().Format(time.RFC3339), o.Overlap)
		}
		if next, err = FinishRotation(cur); err != nil {
			return st, err
		}
		delete(s.Annotations, AnnotationRotationStarted)
		s.Annotations[AnnotationRotationFinished] = t.UTC().Format(time.RFC3339)
	} else {
		td := ""
		if o := cur.Root.Subject.Organization; len(o) > 0 {
			td = o[0]
		}
		if next, err = StartRotation(cur, td, keyTypeOf(cur), t); err != nil {
			return statusOf(cur, s.Annotations, o.Overlap), err
		}
		s.Annotations[AnnotationRotationStarted] = t.UTC().Format(time.RFC3339)
	}
	if s.Data, err = next.Data(); err != nil {
		return RotationStatus{}, err
	}
	// The update carries the resourceVersion read above: two rotations at
	// once, or a replica's create racing this, cannot overwrite each other.
	out, err := secrets.Update(ctx, s, metav1.UpdateOptions{})
	if err != nil {
		if apierrors.IsConflict(err) {
			return RotationStatus{}, fmt.Errorf("secret %s/%s changed while rotating: run the command again", o.Namespace, SecretSelfSigned)
		}
		return RotationStatus{}, fmt.Errorf("update secret %s/%s: %w", o.Namespace, SecretSelfSigned, err)
	}
	st := statusOf(next, out.Annotations, o.Overlap)
	if o.Finish {
		st.Step = "finished"
	}
	return st, nil
}

func refusePluggedIn(ctx context.Context, client kubernetes.Interface, namespace string) error {
	_, err := client.CoreV1().Secrets(namespace).Get(ctx, SecretPluggedIn, metav1.GetOptions{})
	switch {
	case err == nil:
		return fmt.Errorf("secret %s/%s is in force (a plugged-in CA): rotate it by changing cacerts, with both roots in root-cert.pem during the overlap (SECURITY.md)", namespace, SecretPluggedIn)
	case apierrors.IsNotFound(err):
		return nil
	default:
		return fmt.Errorf("get secret %s/%s: %w", namespace, SecretPluggedIn, err)
	}
}

func statusOf(b *Bundle, annotations map[string]string, overlap time.Duration) RotationStatus {
	st := RotationStatus{Step: "none", Signer: b.Cert.Subject.String()}
	for _, a := range b.Anchors {
		sum := sha256.Sum256(a.Raw)
		st.Roots = append(st.Roots, a.Subject.String()+" sha256:"+hex.EncodeToString(sum[:]))
	}
	if _, ok := b.Rotating(); ok {
		st.Step = "started"
		// Without the annotation (a bundle written by hand), the overlap
		// counts from the cross-signed certificate's issue.
		st.Started = b.Cert.NotBefore.Add(time.Hour)
		if t, err := time.Parse(time.RFC3339, annotations[AnnotationRotationStarted]); err == nil {
			st.Started = t
		}
		st.FinishAfter = st.Started.Add(overlap)
	}
	return st
}

func keyTypeOf(b *Bundle) string {
	switch b.Key.Public().(type) {
	case *rsa.PublicKey:
		return KeyTypeRSA
	case *ecdsa.PublicKey:
		return KeyTypeECDSA
	}
	return ""
}
