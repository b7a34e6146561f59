"""The optional customer-managed KMS key of the stack's log groups (``warmstart.logs.kms_key``).

CloudWatch Logs encrypts every log group by default (AES-256-GCM under a key AWS owns). With
``logs.kms_key`` true the stack makes one symmetric customer-managed key, rotated yearly, and the
agents' log groups, the HTTP API access logs and the warmer's log group name it as their
``KmsKeyId``. The key policy keeps CDK's default statement (the account's IAM policies decide
who administers and uses the key) and adds the statement CloudWatch Logs needs, as the AWS guide
gives it: principal ``logs.<region>.amazonaws.com``; ``kms:Encrypt*``, ``kms:Decrypt*``,
``kms:ReEncrypt*``, ``kms:GenerateDataKey*``, ``kms:Describe*``; resource ``*`` (in a key
policy, the key itself); on the condition ``ArnLike kms:EncryptionContext:aws:logs:arn`` =
a log group of this account and region. The condition cannot name the log groups themselves:
their names are generated at deploy time and each group's ``KmsKeyId`` already depends on the
key, so naming them in the key policy would be a circular dependency.

Revoking the statement or deleting the key makes the encrypted logs unreadable; the key is
retained when the stack is deleted (CDK's default removal policy for keys).

References
----------
https://docs.aws.amazon.com/AmazonCloudWatch/latest/logs/encrypt-log-data-kms.html
(step 2, "Set permissions on the KMS key"; encryption context ``kms:EncryptionContext:aws:logs:arn``)
https://docs.aws.amazon.com/kms/latest/developerguide/rotate-keys.html
"""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from constructs import Construct

#: The key-policy actions the CloudWatch Logs guide grants its service principal.
LOGS_KEY_ACTIONS = ("kms:Encrypt*", "kms:Decrypt*", "kms:ReEncrypt*", "kms:GenerateDataKey*",
                    "kms:Describe*")


class LogKey(Construct):
    """One customer-managed key for the stack's log groups, usable by CloudWatch Logs only for
    log groups of this account and region.

    Attributes
    ----------
    key : aws_kms.Key
        Symmetric, rotation on; pass it as ``encryption_key`` of a ``logs.LogGroup``.
    """

    def __init__(self, scope: Construct, construct_id: str) -> None:
        super().__init__(scope, construct_id)
        stack = cdk.Stack.of(self)
        self.key = kms.Key(self, "Key", enable_key_rotation=True,
                           description=f"{stack.stack_name}: encrypts the stack's CloudWatch log groups")
        self.key.add_to_resource_policy(iam.PolicyStatement(
            sid="CloudWatchLogsEncryptsThisAccountsLogGroups",
            principals=[iam.ServicePrincipal(f"logs.{stack.region}.amazonaws.com")],
            actions=list(LOGS_KEY_ACTIONS),
            resources=["*"],
            conditions={"ArnLike": {"kms:EncryptionContext:aws:logs:arn": stack.format_arn(
                service="logs", resource="log-group", resource_name="*",
                arn_format=cdk.ArnFormat.COLON_RESOURCE_NAME)}},
        ))
