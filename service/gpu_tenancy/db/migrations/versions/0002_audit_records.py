"""audit records

Revision ID: 0002
Revises: 0001
"""
from alembic import op
import sqlalchemy as sa


revision = '0002'
down_revision = '0001'
branch_labels = None
depends_on = None

INDEXED = ('at', 'user_id', 'action', 'target_id', 'target_project_id')


def upgrade() -> None:
    op.create_table('audit_records',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('at', sa.DateTime(), nullable=False),
    sa.Column('user_id', sa.String(length=255), nullable=True),
    sa.Column('user_project_id', sa.String(length=255), nullable=True),
    sa.Column('request_id', sa.String(length=64), nullable=True),
    sa.Column('remote_address', sa.String(length=64), nullable=True),
    sa.Column('action', sa.String(length=32), nullable=False),
    sa.Column('target_type', sa.String(length=16), nullable=False),
    sa.Column('target_id', sa.String(length=255), nullable=False),
    sa.Column('target_project_id', sa.String(length=64), nullable=True),
    sa.Column('before', sa.JSON(none_as_null=True), nullable=True),
    sa.Column('after', sa.JSON(none_as_null=True), nullable=True),
    sa.Column('outcome', sa.String(length=16), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('audit_records', schema=None) as batch_op:
        for column in INDEXED:
            batch_op.create_index(batch_op.f(f'ix_audit_records_{column}'), [column], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('audit_records', schema=None) as batch_op:
        for column in INDEXED:
            batch_op.drop_index(batch_op.f(f'ix_audit_records_{column}'))
    op.drop_table('audit_records')
