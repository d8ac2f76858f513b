"""sharing rules: priority classes, GPU-hour budgets, leases ended early

Revision ID: 0003_sharing
Revises: 0002
"""
from alembic import op
import sqlalchemy as sa


revision = '0003_sharing'
down_revision = '0002'
branch_labels = None
depends_on = None

LEASE_COLUMNS = (
    ('priority_class', sa.String(length=64)),
    ('early_end_at', sa.DateTime()),
    ('early_end_kind', sa.String(length=16)),
    ('early_end_for', sa.String(length=36)),
    ('early_end_for_project', sa.String(length=64)),
    ('early_end_reason', sa.Text()),
    ('early_end_from', sa.DateTime()),
)


def upgrade() -> None:
    op.create_table('priority_classes',
    sa.Column('name', sa.String(length=64), nullable=False),
    sa.Column('priority', sa.Integer(), nullable=False),
    sa.Column('preemptible', sa.Boolean(), nullable=False),
    sa.Column('projects', sa.JSON(none_as_null=True), nullable=True),
    sa.Column('description', sa.String(length=512), nullable=False),
    sa.Column('updated_at', sa.DateTime(), nullable=False),
    sa.PrimaryKeyConstraint('name')
    )
    op.create_table('budgets',
    sa.Column('id', sa.String(length=36), nullable=False),
    sa.Column('project_id', sa.String(length=64), nullable=False),
    sa.Column('gpu_model', sa.String(length=64), nullable=False),
    sa.Column('gpu_hours', sa.Float(), nullable=False),
    sa.Column('period', sa.String(length=8), nullable=False),
    sa.Column('start_at', sa.DateTime(), nullable=True),
    sa.Column('end_at', sa.DateTime(), nullable=True),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.CheckConstraint('gpu_hours >= 0', name='ck_budgets_hours'),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('budgets', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_budgets_project_id'), ['project_id'], unique=False)
    with op.batch_alter_table('leases', schema=None) as batch_op:
        batch_op.add_column(sa.Column('preemptible', sa.Boolean(), nullable=False, server_default=sa.false()))
        for name, type_ in LEASE_COLUMNS:
            batch_op.add_column(sa.Column(name, type_, nullable=True))
    with op.batch_alter_table('leases', schema=None) as batch_op:
        batch_op.alter_column('preemptible', server_default=None)


def downgrade() -> None:
    with op.batch_alter_table('leases', schema=None) as batch_op:
        for name, _ in reversed(LEASE_COLUMNS):
            batch_op.drop_column(name)
        batch_op.drop_column('preemptible')
    with op.batch_alter_table('budgets', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_budgets_project_id'))
    op.drop_table('budgets')
    op.drop_table('priority_classes')
