package credentials

import (
	"context"
	"fmt"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// CanRead asks the API server whether the caller may list and watch
// Secrets in every namespace, which Kube needs. Without that permission
// the informer would only log errors: the caller leaves credentials off.
func CanRead(ctx context.Context, client kubernetes.Interface) (bool, error) {
	for _, verb := range []string{"list", "watch"} {
		r, err := client.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
				Verb: verb, Resource: "secrets", Version: "v1",
			}},
		}, metav1.CreateOptions{})
		if err != nil {
			return false, fmt.Errorf("credentials: ask whether Secrets may be read: %w", err)
		}
		if !r.Status.Allowed {
			return false, nil
		}
	}
	return true, nil
}
