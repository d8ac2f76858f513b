"""dashboard sessions

Revision ID: 0006_dashboard_sessions
Revises: 0005_resilience
"""
from alembic import op
import sqlalchemy as sa


revision = '0006_dashboard_sessions'
down_revision = '0005_resilience'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('dashboard_sessions',
    sa.Column('id_hash', sa.String(length=64), nullable=False),
    sa.Column('user_id', sa.String(length=255), nullable=False),
    sa.Column('user_name', sa.String(length=255), nullable=False),
    sa.Column('project_id', sa.String(length=64), nullable=True),
    sa.Column('project_name', sa.String(length=255), nullable=True),
    sa.Column('roles', sa.JSON(), nullable=False),
    sa.Column('projects', sa.JSON(), nullable=False),
    sa.Column('token', sa.Text(), nullable=True),
    sa.Column('unscoped_token', sa.Text(), nullable=True),
    sa.Column('csrf_token', sa.String(length=64), nullable=False),
    sa.Column('dev_mode', sa.Boolean(), nullable=False),
    sa.Column('notices', sa.JSON(), nullable=False),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.Column('expires_at', sa.DateTime(), nullable=False),
    sa.PrimaryKeyConstraint('id_hash')
    )
    with op.batch_alter_table('dashboard_sessions', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_dashboard_sessions_expires_at'), ['expires_at'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('dashboard_sessions', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_dashboard_sessions_expires_at'))
    op.drop_table('dashboard_sessions')
